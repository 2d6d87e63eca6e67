"""Training data: a token stream cut into fixed windows, handed to data-parallel ranks by index.

Sources (nothing is downloaded):
- default: the Python standard library's own source files, a real text corpus on every machine
  that runs Python, read in sorted order;
- user files: .txt/.md/.py text, .jsonl (field "text"), .parquet (column "text"), pre-tokenized
  .npy (1-D integer array) and .bin (raw uint16 tokens, nanoGPT's format; uint32 when the
  vocabulary needs it). A directory means every such file under it, sorted.
- SageMaker input channels: `channel:NAME` is the directory SageMaker mounted for channel NAME
  (SM_CHANNEL_<NAME>, /opt/ml/input/data/<name>); `launch sagemaker --data s3://...` passes these.
Tokenizers: bytes (256 byte values + BOS/EOS/PAD) by default, or a local HF tokenizer.json.

Sharding is a pure function of the step: window index = step * global_batch + micro * dp * mb +
dp_rank * mb + j (mod windows). Every rank computes its own indices, no rank sees another's
samples, and the data position in a checkpoint is just the step: resume is exact by construction.
"""

from __future__ import annotations

import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainplan.errors import TrainplanError

BYTE_VOCAB = 256
BOS, EOS, PAD = 256, 257, 258
BYTE_TOKENIZER_VOCAB = 259
TEXT_SUFFIXES = (".txt", ".md", ".py", ".rst")
DATA_SUFFIXES = TEXT_SUFFIXES + (".jsonl", ".parquet", ".npy", ".bin")


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255, plus BOS/EOS/PAD: no vocabulary file, no unknown tokens."""

    vocab_size = BYTE_TOKENIZER_VOCAB
    eos_id = EOS

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8", errors="replace"))


class HFTokenizer:
    """A local tokenizer.json (the `tokenizers` library, installed with transformers)."""

    def __init__(self, path: str):
        from tokenizers import Tokenizer

        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise TrainplanError(f"tokenizer {str(p)!r} does not exist; give a local tokenizer.json")
        self._tok = Tokenizer.from_file(str(p))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        eos = next((self._tok.token_to_id(t) for t in ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>")
                    if self._tok.token_to_id(t) is not None), None)
        self.eos_id = eos if eos is not None else 0

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids


def make_tokenizer(path: str | None):
    return HFTokenizer(path) if path else ByteTokenizer()


def stdlib_files() -> list[Path]:
    """The standard library's .py files, sorted; site-packages and the test suite left out so the
    corpus is the same on every install of the same Python version."""
    import os

    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"}
    found = []
    for d, subdirs, files in os.walk(root):
        subdirs[:] = [s for s in subdirs if s not in skip]  # prune: site-packages can be huge
        found += [Path(d) / f for f in files if f.endswith(".py")]
    return sorted(found)


CHANNEL_PREFIX = "channel:"


def channel_dir(name: str, env=None) -> Path:
    """The directory of SageMaker input channel `name`: SM_CHANNEL_<NAME> (the SDK's
    container_drivers/scripts/environment.py upper-cases the name)."""
    import os

    env = os.environ if env is None else env
    var = f"SM_CHANNEL_{name.upper()}"
    if var not in env:
        known = sorted(k.removeprefix("SM_CHANNEL_").lower() for k in env if k.startswith("SM_CHANNEL_"))
        raise TrainplanError(
            f"data {CHANNEL_PREFIX}{name}: {var} is not set, so no SageMaker channel {name!r} is mounted "
            f"(channels here: {', '.join(known) or 'none'}); launch with --data {name}=s3://..."
        )
    return Path(env[var])


def data_files(spec: str) -> list[Path]:
    """Files named by `spec`: comma-separated files, directories or `channel:NAME`."""
    out: list[Path] = []
    for part in (s.strip() for s in spec.split(",") if s.strip()):
        p = channel_dir(part[len(CHANNEL_PREFIX):]) if part.startswith(CHANNEL_PREFIX) else Path(part)
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.suffix in DATA_SUFFIXES and f.is_file())
        elif part.startswith(CHANNEL_PREFIX):
            raise TrainplanError(f"data {part}: {p} is not a directory (SageMaker mounts channels as directories)")
        elif p.is_file():
            if p.suffix not in DATA_SUFFIXES:
                raise TrainplanError(f"data file {part!r}: unknown kind; use one of {', '.join(DATA_SUFFIXES)}")
            out.append(p)
        else:
            raise TrainplanError(f"data {part!r} does not exist")
    if not out:
        raise TrainplanError(f"data {spec!r} holds no {'/'.join(DATA_SUFFIXES)} files")
    return out


def _texts(path: Path):
    if path.suffix in TEXT_SUFFIXES:
        yield path.read_text(encoding="utf-8", errors="replace")
    elif path.suffix == ".jsonl":
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    yield json.loads(line)["text"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise TrainplanError(f"{path}:{n}: expected a JSON object with a \"text\" field") from None
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        if "text" not in table.column_names:
            raise TrainplanError(f"{path}: no 'text' column (columns: {', '.join(table.column_names)})")
        yield from table.column("text").to_pylist()


def _tokens_of(path: Path, tokenizer, vocab_size: int) -> np.ndarray:
    if path.suffix == ".npy":
        arr = np.load(path, mmap_mode="r")
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise TrainplanError(f"{path}: expected a 1-D integer array of token ids, got {arr.dtype} {arr.shape}")
        return np.asarray(arr, dtype=np.int64)
    if path.suffix == ".bin":
        return np.fromfile(path, dtype=np.uint16 if vocab_size <= 65536 else np.uint32).astype(np.int64)
    ids: list[int] = []
    for text in _texts(path):
        ids += tokenizer.encode(text)
        ids.append(tokenizer.eos_id)
    return np.asarray(ids, dtype=np.int64)


def load_tokens(files: list[Path], tokenizer, vocab_size: int, needed: int) -> np.ndarray:
    """Concatenate tokens of the files in order, stopping once `needed` tokens are read (the
    stream is then cycled if shorter). Reading stops early so a short run starts in seconds."""
    parts, n = [], 0
    for f in files:
        t = _tokens_of(f, tokenizer, vocab_size)
        parts.append(t)
        n += len(t)
        if n >= needed:
            break
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(stream) == 0:
        raise TrainplanError("the training data holds no tokens")
    if stream.max() >= vocab_size:
        raise TrainplanError(
            f"the data holds token id {int(stream.max())} but the model's vocabulary has {vocab_size} entries; "
            "use a tokenizer that matches the model"
        )
    return stream


@dataclass
class Batches:
    """Windows of seq_len + 1 tokens (inputs and shifted labels), addressed by step."""

    stream: np.ndarray
    seq_len: int
    micro_batch: int
    grad_accum: int
    dp: int
    dp_rank: int

    @property
    def num_windows(self) -> int:
        return max(1, (len(self.stream) - 1) // self.seq_len)

    def window(self, index: int) -> np.ndarray:
        """Window `index`; a stream shorter than one window is tiled (a toy corpus still runs)."""
        i = index % self.num_windows
        start = i * self.seq_len
        w = self.stream[start:start + self.seq_len + 1]
        if len(w) < self.seq_len + 1:
            w = np.resize(np.concatenate([w, self.stream]), self.seq_len + 1)
        return w

    def micro(self, step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, labels) of this rank's micro-batch `micro` of optimizer step `step` (0-based)."""
        gb = self.micro_batch * self.grad_accum * self.dp
        first = step * gb + micro * self.dp * self.micro_batch + self.dp_rank * self.micro_batch
        rows = np.stack([self.window(first + j) for j in range(self.micro_batch)])
        t = torch.from_numpy(rows)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def make_batches(data: str, tokenizer_path: str | None, vocab_size: int, seq_len: int, micro_batch: int,
                 grad_accum: int, dp: int, dp_rank: int, steps: int) -> Batches:
    tok = make_tokenizer(tokenizer_path)
    if tok.vocab_size > vocab_size and not data.endswith((".npy", ".bin")):
        raise TrainplanError(
            f"the tokenizer has {tok.vocab_size} tokens but the model's vocabulary has {vocab_size}; "
            "give a model with a vocabulary at least as large, or a matching tokenizer.json"
        )
    files = data_files(data) if data else stdlib_files()
    needed = steps * micro_batch * grad_accum * dp * seq_len + seq_len + 1
    stream = load_tokens(files, tok, vocab_size, needed)
    return Batches(stream, seq_len, micro_batch, grad_accum, dp, dp_rank)
