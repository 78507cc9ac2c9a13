"""qmap.convert and qmap.quantize (the library's qmap_convert / qmap_quantize) against `qmap convert` and
`qmap quantize` of the same inputs: the outputs must be the same bytes."""
import filecmp
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import qmap
from conftest import DATA, QMAP_BIN, ROOT, run_qmap


def _same_bytes(a, b):
    assert os.path.getsize(a) == os.path.getsize(b)
    assert filecmp.cmp(a, b, shallow=False), "%s and %s differ" % (a, b)


# qmap convert --json's names for the fields of qmap.convert's result
CLI_SUMMARY_KEYS = {"architecture": "arch", "input_kind": "input_kind", "config": "config", "tokenizer": "tokenizer",
                    "input_files": "input_files", "input_bytes": "input_bytes", "tensors": "n_tensors",
                    "parameters": "n_params", "skipped": "n_skipped", "tied_output": "tied_output",
                    "nonfinite_values": "nonfinite_values", "compressed_bytes": "compressed_bytes",
                    "inflated_bytes": "inflated_bytes", "output_bytes": "output_bytes"}


def test_convert_is_qmap_convert(kjv, tmp_path):
    out = str(tmp_path / "kjv.qmap")
    seen = []
    r = qmap.convert(os.path.join(DATA, "kjv_llama"), out, progress=seen.append)
    _same_bytes(out, kjv["f32"])   # the conftest fixture: `qmap convert tests/data/kjv_llama`
    summary = json.loads(run_qmap("convert", os.path.join(DATA, "kjv_llama"), "-o", str(tmp_path / "cli.qmap"),
                                  "--json"))
    assert {ours: r[ours] for ours in CLI_SUMMARY_KEYS.values()} == \
        {ours: summary[cli] for cli, ours in CLI_SUMMARY_KEYS.items()}
    assert seen and all(isinstance(p, qmap.Progress) for p in seen)
    assert seen[-1].tensor == seen[-1].n_tensors == r["n_tensors"]
    assert seen[-1].bytes_done == seen[-1].bytes_total


def test_convert_options_are_the_cli_options(tmp_path):
    src = os.path.join(DATA, "g2p")
    cli = str(tmp_path / "cli.qmap")
    run_qmap("convert", os.path.join(src, "model.pt"), "--src-tokenizer", os.path.join(src, "src", "tokenizer.json"),
             "--tgt-tokenizer", os.path.join(src, "tgt", "tokenizer.json"), "--dtype", "f16", "-o", cli, "--quiet")
    lib = str(tmp_path / "lib.qmap")
    qmap.convert(os.path.join(src, "model.pt"), lib, src_tokenizer=os.path.join(src, "src", "tokenizer.json"),
                 tgt_tokenizer=os.path.join(src, "tgt", "tokenizer.json"), dtype="f16")
    _same_bytes(lib, cli)


def test_convert_of_shards_given_together(tmp_path):
    a, b = str(tmp_path / "a.pt"), str(tmp_path / "b.pt")
    torch.manual_seed(3)
    torch.save({"x.weight": torch.randn(5, 7)}, a)
    torch.save({"y.bias": torch.randn(9)}, b)
    cli = str(tmp_path / "cli.qmap")
    run_qmap("convert", a, b, "--arch", "none", "-o", cli, "--quiet")
    lib = str(tmp_path / "lib.qmap")
    r = qmap.convert([a, b], lib, arch="none")
    _same_bytes(lib, cli)
    assert r["n_tensors"] == 2 and r["input_files"] == 2


@pytest.mark.parametrize("scheme", ["q8", "f16"])
def test_quantize_is_qmap_quantize(kjv, tmp_path, scheme):
    cli = str(tmp_path / "cli.qmap")
    report = json.loads(run_qmap("quantize", "--" + scheme, kjv["f32"], "-o", cli, "--json"))
    lib = str(tmp_path / "lib.qmap")
    seen = []
    r = qmap.quantize(kjv["f32"], lib, **{scheme: True}, threads=1, progress=seen.append)
    _same_bytes(lib, cli)
    assert seen[-1].tensor == seen[-1].n_tensors == len(report["tensors"])
    # the report is the CLI's, tensor by tensor
    total = report["total"]
    assert (r["n_quantized"], r["n_copied"]) == (total["tensors_quantized"], total["tensors_copied"])
    assert (r["bytes_in"], r["bytes_out"]) == (total["bytes_in"], total["bytes_out"])
    assert r["rel_rms_error"] == pytest.approx(total["rel_rms_error"], rel=1e-12)
    assert r["kernels"] == report["kernels"]
    assert [t["name"] for t in r["tensors"]] == [t["name"] for t in report["tensors"]]
    for got, want in zip(r["tensors"], report["tensors"]):
        for key, value in want.items():
            assert got[key] == (pytest.approx(value, rel=1e-12) if isinstance(value, float) else value), key


def test_quantize_keep_and_panels_are_the_cli_options(kjv, tmp_path):
    cli = str(tmp_path / "cli.qmap")
    run_qmap("quantize", "--q8", kjv["f32"], "--keep", "output.weight", "--keep", "blk.0.*", "--panel-cols", "0",
             "-o", cli, "--quiet")
    lib = str(tmp_path / "lib.qmap")
    qmap.quantize(kjv["f32"], lib, keep=["output.weight", "blk.0.*"], panel_cols=0)
    _same_bytes(lib, cli)
    with qmap.open(lib) as c:
        assert isinstance(c.tensors["output.weight"], np.ndarray)


def test_convert_and_quantize_errors(tmp_path, kjv):
    out = str(tmp_path / "out.qmap")
    with pytest.raises(qmap.FileIOError):
        qmap.convert(str(tmp_path / "absent.pt"), out)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"PK\x03\x04 not a zip at all")
    with pytest.raises(qmap.Error) as e:
        qmap.convert(str(junk), out)
    assert "junk.pt" in str(e.value)
    with pytest.raises(qmap.FormatError):
        qmap.quantize(str(junk), out)
    assert not os.path.exists(out)   # nothing left behind on failure
    for bad in (dict(q8=True, f16=True), dict(q8=False), dict(threads=-1), dict(panel_cols="wide"),
                dict(keep="output.weight")):
        with pytest.raises(qmap.InvalidArgumentError):
            qmap.quantize(kjv["f32"], out, **bad)
    for bad in (dict(dtype="q8"), dict(arch=""), dict(json_limit=0), dict(progress=3)):
        with pytest.raises(qmap.InvalidArgumentError):
            qmap.convert(os.path.join(DATA, "kjv_llama"), out, **bad)
    with pytest.raises(qmap.InvalidArgumentError):
        qmap.convert([], out)


def test_an_exception_in_progress_is_raised_after_the_call(kjv, tmp_path):
    def stop(p):
        raise KeyError("from progress")
    out = str(tmp_path / "q8.qmap")
    with pytest.raises(KeyError, match="from progress"):
        qmap.quantize(kjv["f32"], out, progress=stop)


def test_nan_is_a_warning_or_with_strict_an_error(tmp_path):
    pt = str(tmp_path / "nan.pt")
    w = torch.ones(4, 4)
    w[1, 2] = float("nan")
    torch.save({"w.weight": w}, pt)
    with pytest.warns(qmap.ConvertWarning, match="w.weight"):
        r = qmap.convert(pt, str(tmp_path / "nan.qmap"), arch="none")
    assert r["nonfinite_values"] == 1
    with pytest.raises(qmap.WeightsError):
        qmap.convert(pt, str(tmp_path / "strict.qmap"), arch="none", strict=True)


def test_example_container_runs(tmp_path):
    """examples/container.py (make demo) runs as its docstring says, and its figures are the library's."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "container.py"), os.path.join(DATA, "kjv_llama"),
                        str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with qmap.open(str(tmp_path / "container-q8.qmap")) as c:
        assert repr(c) in r.stdout
    assert r.stdout.endswith("verify: every checksum matches\n")


def test_quantize_shards_is_the_cli_option(kjv, tmp_path):
    """shards=N reaches the library as --shards N does: the KJV Llama's ffn (688, not a multiple of 64) has
    no down-projection panels for 2 ranks, and both refuse it naming the tensor; without it both write."""
    out = str(tmp_path / "s2.qmap")
    cli = subprocess.run([QMAP_BIN, "quantize", "--q8", "--shards", "2", kjv["f32"],
                          "-o", out, "--quiet"], capture_output=True, text=True)
    assert cli.returncode == 1 and "blk.0.ffn_down.weight" in cli.stderr, cli.stderr
    with pytest.raises(qmap.UnsupportedError) as e:
        qmap.quantize(kjv["f32"], out, shards=2)
    assert "blk.0.ffn_down.weight" in str(e.value) and "--shards 2" in str(e.value)
    assert not os.path.exists(out)
    for bad in (-1, 4097, True, "2"):
        with pytest.raises(qmap.InvalidArgumentError):
            qmap.quantize(kjv["f32"], out, shards=bad)
