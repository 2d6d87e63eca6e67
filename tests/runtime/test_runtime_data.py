"""Data: the built-in corpus, user files, the byte tokenizer, and deterministic rank sharding."""

import json

import numpy as np
import pytest

from trainplan.errors import TrainplanError
from trainplan.runtime.data import (
    BYTE_TOKENIZER_VOCAB,
    Batches,
    ByteTokenizer,
    data_files,
    load_tokens,
    make_batches,
    stdlib_files,
)


def test_stdlib_corpus_is_sorted_python_source_without_tests():
    files = stdlib_files()
    assert len(files) > 100
    assert files == sorted(files)
    assert all(f.suffix == ".py" and "site-packages" not in f.parts and "test" not in f.parts for f in files)


def test_byte_tokenizer_round_trips_utf8():
    ids = ByteTokenizer().encode("héllo")
    assert ids == list("héllo".encode()) and max(ids) < 256


def test_ranks_get_disjoint_consecutive_windows_and_shifted_labels():
    stream = np.arange(10_000, dtype=np.int64)
    r0 = Batches(stream, seq_len=8, micro_batch=2, grad_accum=2, dp=2, dp_rank=0)
    r1 = Batches(stream, seq_len=8, micro_batch=2, grad_accum=2, dp=2, dp_rank=1)
    seen = []
    for micro in range(2):
        for r in (r0, r1):
            x, y = r.micro(step=3, micro=micro)
            assert x.shape == (2, 8) and np.array_equal(y.numpy(), x.numpy() + 1)
            seen += [int(row[0]) // 8 for row in x]
    # step 3 of a global batch of 8 windows: windows 24..31, each exactly once
    assert sorted(seen) == list(range(24, 32))
    assert np.array_equal(r0.micro(3, 1)[0].numpy(), r0.micro(3, 1)[0].numpy())


def test_default_corpus_batches(tmp_path):
    b = make_batches("", None, BYTE_TOKENIZER_VOCAB, 32, 2, 1, 1, 0, steps=2)
    x, y = b.micro(0, 0)
    assert x.shape == y.shape == (2, 32) and int(x.max()) < BYTE_TOKENIZER_VOCAB


def test_user_files_text_jsonl_npy_bin(tmp_path):
    (tmp_path / "a.txt").write_text("abc")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "de"}) + "\n")
    np.save(tmp_path / "c.npy", np.array([1, 2, 3], dtype=np.int32))
    np.array([7, 8], dtype=np.uint16).tofile(tmp_path / "d.bin")
    files = data_files(str(tmp_path))
    assert [f.name for f in files] == ["a.txt", "b.jsonl", "c.npy", "d.bin"]
    t = load_tokens(files, ByteTokenizer(), BYTE_TOKENIZER_VOCAB, needed=10**9)
    eos = ByteTokenizer.eos_id
    assert t.tolist() == [97, 98, 99, eos, 100, 101, eos, 1, 2, 3, 7, 8]


def test_bad_data_is_a_one_line_error(tmp_path):
    with pytest.raises(TrainplanError, match="data 'nope' does not exist"):
        data_files("nope")
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"txt": 1}\n')
    with pytest.raises(TrainplanError, match=r"x.jsonl:1: expected a JSON object with a \"text\" field"):
        load_tokens([bad], ByteTokenizer(), 300, 10)
    np.save(tmp_path / "big.npy", np.array([5, 999]))
    with pytest.raises(TrainplanError, match="token id 999 but the model's vocabulary has 300 entries"):
        load_tokens([tmp_path / "big.npy"], ByteTokenizer(), 300, 10)


def test_parquet_text_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["ab", "c"]}), tmp_path / "t.parquet")
    t = load_tokens([tmp_path / "t.parquet"], ByteTokenizer(), BYTE_TOKENIZER_VOCAB, needed=100)
    assert t.tolist() == [97, 98, ByteTokenizer.eos_id, 99, ByteTokenizer.eos_id]
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "u.parquet")
    with pytest.raises(TrainplanError, match="u.parquet: no 'text' column \\(columns: body\\)"):
        load_tokens([tmp_path / "u.parquet"], ByteTokenizer(), BYTE_TOKENIZER_VOCAB, needed=100)


def test_local_hf_tokenizer_json(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from trainplan.runtime.data import make_tokenizer

    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"hello": 0, "world": 1, "</s>": 2, "[UNK]": 3},
                                                           unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    t = make_tokenizer(str(tmp_path))  # a directory holding tokenizer.json works too
    assert t.encode("hello world again") == [0, 1, 3] and t.eos_id == 2 and t.vocab_size == 4
    with pytest.raises(TrainplanError, match="tokenizer .* does not exist; give a local tokenizer.json"):
        make_tokenizer(str(tmp_path / "missing.json"))


def test_sagemaker_channels_are_read_where_sagemaker_mounts_them(tmp_path, monkeypatch):
    """`launch sagemaker --data s3://...` passes `channel:NAME`; the container has SM_CHANNEL_<NAME>
    pointing at the mounted directory (sagemaker 3.27 container_drivers/scripts/environment.py)."""
    train, val = tmp_path / "train", tmp_path / "val"
    for d, name in ((train, "a.txt"), (val, "b.jsonl")):
        d.mkdir()
        (d / name).write_text("hello\n" if name.endswith(".txt") else '{"text": "x"}\n')
    monkeypatch.setenv("SM_CHANNEL_TRAIN", str(train))
    monkeypatch.setenv("SM_CHANNEL_VAL", str(val))
    assert data_files("channel:train,channel:val") == [train / "a.txt", val / "b.jsonl"]
    assert data_files(f"channel:train,{val / 'b.jsonl'}") == [train / "a.txt", val / "b.jsonl"]


def test_a_channel_that_is_not_mounted_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SM_CHANNEL_TRAIN", str(tmp_path))
    monkeypatch.delenv("SM_CHANNEL_EVAL", raising=False)
    with pytest.raises(TrainplanError) as e:
        data_files("channel:eval")
    assert str(e.value) == ("data channel:eval: SM_CHANNEL_EVAL is not set, so no SageMaker channel 'eval' is "
                            "mounted (channels here: train); launch with --data eval=s3://...")
