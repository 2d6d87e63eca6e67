"""Which decoder layer the bytes kept for backward belong to.

MemTracker gives exact live bytes, but the residual stream makes a naive "growth across the
layer's forward" wrong by one hidden-state tensor: a layer's output stays referenced by the
caller's loop variable until the next layer has returned, and is freed later, outside any layer.
So bytes are attributed by storage, at the end of the forward pass:

- every storage created by an op while layer i runs its forward is tagged i (a TorchDispatchMode
  that sees each op's outputs; weak references, so nothing is kept alive by the bookkeeping);
- what is still alive when the forward pass ends is what backward needs;
- a layer's *output* is a hand-off, not the layer's own: it counts for whoever keeps it (the next
  layer when its checkpoint holds its input, or the code after the last layer);
- so layer i's activation bytes = alive storages tagged i, minus its alive outputs, plus its
  alive inputs (the checkpoint of a fully recomputed layer holds exactly its input).

`saved_tensors_hooks` see the tensors autograd packs; a non-reentrant checkpoint packs through its
own inner hooks, so they are a cross-check only without checkpointing. They are counted the same
way (unique storages, parameters excluded, inputs included, storages created outside the layer
such as the shared RoPE tables excluded).
"""

from __future__ import annotations

import weakref


def _storages(obj, out: list) -> list:
    import torch

    if isinstance(obj, torch.Tensor):
        out.append(obj.untyped_storage())
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            _storages(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _storages(x, out)
    elif hasattr(obj, "to_tuple"):  # transformers ModelOutput
        _storages(obj.to_tuple(), out)
    return out


class LayerAttribution:
    """Tag storages by layer during one forward pass; read per-layer kept bytes afterwards."""

    def __init__(self, layers, param_storages: set[int]):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        self.k = len(layers)
        self.recording = False
        self.layer: int | None = None
        self.tag: dict[int, tuple[weakref.ref, int, int]] = {}  # id -> (ref, layer, nbytes)
        self.inputs = {i: {} for i in range(self.k)}
        self.outputs = {i: {} for i in range(self.k)}
        self.packed = {i: {} for i in range(self.k)}
        self.params = param_storages
        self.what: dict[int, tuple[str, tuple, str]] = {}  # id -> (creating op, shape, dtype)
        owner = self

        class _Tagger(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                res = func(*args, **(kwargs or {}))
                if owner.recording and owner.layer is not None:
                    # views and in-place ops return an input's storage: not a new allocation
                    seen = {id(x) for x in _storages(args, [])} | {id(x) for x in _storages(kwargs, [])}
                    outs = res if isinstance(res, (tuple, list)) else (res,)
                    for t in outs:
                        if not isinstance(t, torch.Tensor):
                            continue
                        st = t.untyped_storage()
                        key = id(st)
                        if key in seen or key in owner.params:
                            continue
                        old = owner.tag.get(key)
                        if old is None or old[0]() is None:
                            owner.tag[key] = (weakref.ref(st), owner.layer, st.nbytes())
                            owner.what[key] = (func.__name__.split(".")[0], tuple(t.shape), str(t.dtype).replace("torch.", ""))
                return res

        self.mode = _Tagger()
        for i, layer in enumerate(layers):
            layer.register_forward_pre_hook(self._pre(i), with_kwargs=True)
            layer.register_forward_hook(self._post(i))

    def _pre(self, i):
        def hook(mod, args, kwargs):
            if self.recording:
                self.layer = i
                for st in _storages(args, []) + _storages(kwargs.get("hidden_states"), []):
                    self.inputs[i][id(st)] = (weakref.ref(st), st.nbytes())
        return hook

    def _post(self, i):
        def hook(mod, args, out):
            if self.recording:
                for st in _storages(out, []):
                    self.outputs[i][id(st)] = (weakref.ref(st), st.nbytes())
                self.layer = None
        return hook

    def pack(self, t):
        i = self.layer
        if self.recording and i is not None:
            st = t.untyped_storage()
            if id(st) not in self.params:
                self.packed[i][id(st)] = (weakref.ref(st), st.nbytes())
        return t

    def start(self):
        self.recording = True
        self.mode.__enter__()

    def stop(self):
        self.mode.__exit__(None, None, None)
        self.recording = False
        self.layer = None

    def kept_bytes(self) -> list[int]:
        """Per layer: bytes alive now that the layer created or holds as input, minus its outputs."""
        alive = {key: (i, n) for key, (ref, i, n) in self.tag.items() if ref() is not None}
        out = []
        for i in range(self.k):
            own = sum(n for key, (j, n) in alive.items() if j == i)
            outs = sum(n for key, (ref, n) in self.outputs[i].items()
                       if ref() is not None and alive.get(key, (None,))[0] == i)
            ins = sum(n for key, (ref, n) in self.inputs[i].items()
                      if ref() is not None and alive.get(key, (None,))[0] != i and key not in self.params)
            out.append(own - outs + ins)
        return out

    def saved_bytes(self) -> list[int]:
        """Per layer: unique packed storages created in the layer or given to it as input."""
        res = []
        for i in range(self.k):
            mine = {key for key, (ref, j, n) in self.tag.items() if j == i} | set(self.inputs[i])
            res.append(sum(n for key, (ref, n) in self.packed[i].items() if key in mine))
        return res


    def inventory(self, i: int) -> list[dict]:
        """The tensors layer i keeps for backward: creating op, shape, dtype, bytes (largest first)."""
        rows = []
        for key, (ref, j, n) in self.tag.items():
            if j == i and ref() is not None and key not in self.outputs[i]:
                op, shape, dtype = self.what.get(key, ("?", (), "?"))
                rows.append({"op": op, "shape": list(shape), "dtype": dtype, "bytes": n})
        for key, (ref, n) in self.inputs[i].items():
            if ref() is not None and self.tag.get(key, (None, None))[1] != i and key not in self.params:
                rows.append({"op": "input", "shape": [], "dtype": "", "bytes": n})
        return sorted(rows, key=lambda r: -r["bytes"])
