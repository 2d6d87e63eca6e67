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
        try:
            self._tok = Tokenizer.from_file(str(p))
        except Exception as e:  # noqa: BLE001 (the Rust library raises a bare Exception for a file it cannot parse)
            raise TrainplanError(f"tokenizer {str(p)!r} is not a tokenizer.json the tokenizers library reads "
                                 f"({' '.join(str(e).split())[:120]})") from None
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


def _texts(path: Path, sample: int | None = None):
    """The documents of a text file; with `sample`, only its first `sample` documents (bytes of a
    plain text file)."""
    try:
        if path.suffix in TEXT_SUFFIXES:
            with open(path, encoding="utf-8", errors="replace") as f:
                yield f.read() if sample is None else f.read(sample)
        elif path.suffix == ".jsonl":
            with open(path, encoding="utf-8") as f:
                docs = 0
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        text = json.loads(line)["text"]
                    except (json.JSONDecodeError, KeyError, TypeError):
                        raise TrainplanError(f"{path}:{n}: expected a JSON object with a \"text\" field") from None
                    if not isinstance(text, str):
                        raise TrainplanError(f"{path}:{n}: \"text\" must be a string, got {type(text).__name__}")
                    yield text
                    docs += 1
                    if sample is not None and docs >= sample:
                        return
        elif path.suffix == ".parquet":
            yield from _parquet_texts(path, sample)
    except UnicodeDecodeError as e:
        raise TrainplanError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _parquet_texts(path: Path, sample: int | None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise TrainplanError(f"{path}: not a readable parquet file ({e})") from None
    if "text" not in f.schema_arrow.names:
        raise TrainplanError(f"{path}: no 'text' column (columns: {', '.join(f.schema_arrow.names)})")
    if not (pa.types.is_string(f.schema_arrow.field("text").type) or pa.types.is_large_string(f.schema_arrow.field("text").type)):
        raise TrainplanError(f"{path}: column 'text' must hold strings, not {f.schema_arrow.field('text').type}")
    for batch in f.iter_batches(columns=["text"], batch_size=sample or 65536):
        yield from (t for t in batch.column(0).to_pylist() if t is not None)
        if sample is not None:
            return


def _tokens_of(path: Path, tokenizer, vocab_size: int, sample: int | None = None) -> np.ndarray:
    """The tokens of one file; with `sample`, of its first `sample` tokens (.npy, .bin), documents
    (.jsonl, .parquet) or bytes (plain text): what `trainplan train` reads before it starts."""
    if path.suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r")
        except (ValueError, OSError) as e:
            raise TrainplanError(f"{path}: not a readable .npy array ({e})") from None
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise TrainplanError(f"{path}: expected a 1-D integer array of token ids, got {arr.dtype} {arr.shape}")
        return np.asarray(arr if sample is None else arr[:sample], dtype=np.int64)
    if path.suffix == ".bin":
        dtype = np.uint16 if vocab_size <= 65536 else np.uint32
        return np.fromfile(path, dtype=dtype, count=-1 if sample is None else sample).astype(np.int64)
    ids: list[int] = []
    for text in _texts(path, sample):
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

    def micro(self, step: int, micro: int):
        """(inputs, labels) of this rank's micro-batch `micro` of optimizer step `step` (0-based), as
        torch tensors (torch is imported here: `trainplan train` reads a sample of the data with this
        module before any process starts, without torch)."""
        import torch

        gb = self.micro_batch * self.grad_accum * self.dp
        first = step * gb + micro * self.dp * self.micro_batch + self.dp_rank * self.micro_batch
        rows = np.stack([self.window(first + j) for j in range(self.micro_batch)])
        t = torch.from_numpy(rows)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def open_data(data: str, tokenizer_path: str | None, vocab_size: int) -> tuple[object, list[Path]]:
    """(tokenizer, files) of a run: the checks made before any token is read, by each rank and by
    `trainplan train` before it starts them."""
    tok = make_tokenizer(tokenizer_path)
    if tok.vocab_size > vocab_size and not data.endswith((".npy", ".bin")):
        raise TrainplanError(
            f"the tokenizer has {tok.vocab_size} tokens but the model's vocabulary has {vocab_size}; "
            "give a model with a vocabulary at least as large, or a matching tokenizer.json"
        )
    return tok, data_files(data) if data else stdlib_files()


SAMPLE_FILES = 8  # files whose start check_sample reads
SAMPLE = 256  # tokens, documents or (x 1024) bytes of each


def check_sample(files: list[Path], tokenizer, vocab_size: int) -> None:
    """Read the start of the first SAMPLE_FILES files with the reader the ranks use (_tokens_of),
    so that a file of the wrong kind, a malformed record or a token id past the vocabulary is
    refused before any process starts rather than seconds into the run; the rest is read (and
    checked the same way) by load_tokens."""
    seen = 0
    for f in files[:SAMPLE_FILES]:
        t = _tokens_of(f, tokenizer, vocab_size, SAMPLE * (1024 if f.suffix in TEXT_SUFFIXES else 1))
        seen += len(t)
        if len(t) and t.max() >= vocab_size:
            raise TrainplanError(f"{f}: holds token id {int(t.max())} but the model's vocabulary has {vocab_size} "
                                 "entries; use a tokenizer that matches the model")
    if not seen and len(files) <= SAMPLE_FILES:
        raise TrainplanError("the training data holds no tokens")


def token_bound(files: list[Path], vocab_size: int) -> int:
    """At most how many tokens `files` hold, from their sizes without reading them: an array's
    length (.npy, .bin), a byte per token (plus the end-of-document one) for text, the
    uncompressed size for parquet. The host-memory preflight counts the stream from it."""
    n = 0
    for f in files:
        if f.suffix == ".npy":
            n += int(np.load(f, mmap_mode="r").shape[0])
        elif f.suffix == ".bin":
            n += f.stat().st_size // (2 if vocab_size <= 65536 else 4)
        elif f.suffix == ".parquet":
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(f).metadata
            n += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)) + meta.num_rows
        elif f.suffix == ".jsonl":  # each record's 11 bytes of '{"text":""}' outnumber its end-of-document token
            n += f.stat().st_size
        else:
            n += f.stat().st_size + 1
    return n


def tokens_needed(steps: int, micro_batch: int, grad_accum: int, dp: int, seq_len: int) -> int:
    """Tokens a rank reads before it trains (load_tokens stops there; a shorter stream cycles)."""
    return steps * micro_batch * grad_accum * dp * seq_len + seq_len + 1


def make_batches(data: str, tokenizer_path: str | None, vocab_size: int, seq_len: int, micro_batch: int,
                 grad_accum: int, dp: int, dp_rank: int, steps: int) -> Batches:
    tok, files = open_data(data, tokenizer_path, vocab_size)
    stream = load_tokens(files, tok, vocab_size, tokens_needed(steps, micro_batch, grad_accum, dp, seq_len))
    return Batches(stream, seq_len, micro_batch, grad_accum, dp, dp_rank)
