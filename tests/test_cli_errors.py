"""Errors a newcomer meets, in CLI words: unknown or abbreviated flags get a did-you-mean from
their own subcommand, list values get the '|' hint, library parameter names become flags, --help
shows defaults, value formats and the exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import cli_main as run

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("argv, line", [
    (["copy", "{m}", "-o", "{o}", "--outputs", "logits", "--verfy"],
     "onnxsurgeon copy: error: unknown flag '--verfy'; did you mean --verify or --verify-dim? see "
     "'onnxsurgeon copy --help'"),
    (["insert", "{m}", "-o", "{o}", "--at", "act", "--opp", "identity"],
     "onnxsurgeon insert: error: unknown flag '--opp'; did you mean --op or --output? see "
     "'onnxsurgeon insert --help'"),
    (["extract", "{m}", "--out", "{o}", "--outputs", "logits"],  # no abbreviations
     "onnxsurgeon extract: error: unknown flag '--out'; did you mean --output or --outputs? see "
     "'onnxsurgeon extract --help'"),
    (["reroute", "{m}", "-o", "{o}", "--from=act", "--to", "conv5_out", "--prun"],
     "onnxsurgeon reroute: error: unknown flag '--prun'; did you mean --prune? see "
     "'onnxsurgeon reroute --help'"),
    (["convert", "torch", "net.py:build", "-o", "{o}", "--inputz", "x:1x3"],
     "onnxsurgeon convert torch: error: unknown flag '--inputz'; did you mean --input or "
     "--inputs? see 'onnxsurgeon convert torch --help'"),
    (["--verbos", "inspect", "{m}"],
     "onnxsurgeon: error: unknown flag '--verbos'; did you mean --verbose? see "
     "'onnxsurgeon --help'"),
    (["insert", "{m}", "-o", "{o}", "--at", "act", "--op", "reduce_mean:axes=2,3"],
     "onnxsurgeon: error: cannot parse '3' in 'reduce_mean:axes=2,3'; list values are separated "
     "by '|' and parameters by ',': write reduce_mean:axes=2|3"),
    (["insert", "{m}", "-o", "{o}", "--at", "act", "--op", "reduce_mean:axes=[2,3],keepdims=0"],
     "onnxsurgeon: error: cannot parse '3]' in 'reduce_mean:axes=[2,3],keepdims=0'; list values "
     "are separated by '|' and parameters by ',': write reduce_mean:axes=2|3,keepdims=0"),
], ids=["misspelt", "missing-required-too", "abbreviation", "equals-form-ok", "nested",
        "top-level", "list-comma", "list-brackets"])
def test_one_line_in_cli_words_exit_2_no_file(cnn, tmp_path, capsys, argv, line):
    out = tmp_path / "out.onnx"
    code, stdout, err = run(capsys, *[a.format(m=cnn, o=out) for a in argv])
    assert (code, stdout, err) == (2, "", line + "\n")
    assert not out.exists()


def test_library_parameter_names_become_flags(cnn, tmp_path, capsys):
    code, _, err = run(capsys, "insert", cnn, "-o", tmp_path / "o.onnx", "--at", "flat", "--op",
                       "reduce_mean:axes=1,keepdims=0")
    assert code == 2 and err.endswith("; use --as-output to keep the block off the main path, or "
                                      "pick a shape-preserving block\n")
    assert "as_output" not in err


@pytest.mark.parametrize("command", ["inspect", "extract", "copy", "insert", "reroute", "verify",
                                     "rename", "bypass", "merge"])
def test_every_help_has_the_exit_codes(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "exit codes: 0 success; 1 --verify (or verify) found a difference; 2 bad input" in flat
    assert "3 internal error (a bug: please report it; ONNXSURGEON_DEBUG=1 shows the traceback)" \
        in flat


def test_help_shows_defaults_and_value_formats(capsys):
    flat = " ".join(run(capsys, "copy", "--help")[1].split())
    assert "--prefix P name prefix of the copy (default: copy/)" in flat
    assert "(default: independent)" in flat
    flat = " ".join(run(capsys, "insert", "--help")[1].split())
    assert "list values by '|' (reduce_mean:axes=2|3,keepdims=0)" in flat
    assert "scale:factor=F (required)" in flat and "softmax:axis=N (default -1)" in flat
    flat = " ".join(run(capsys, "verify", "--help")[1].split())
    assert "--seed SEED seed of the random inputs (default: 0)" in flat
    assert "--inputs FILE.npz|DIR, --data FILE.npz|DIR" in flat


def test_aliases_keep_the_old_flags_working(cnn, tmp_path, capsys):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    assert run(capsys, "extract", cnn, "-o", a, "--outputs", "logits", "--inputs", "act")[0] == 0
    assert run(capsys, "extract", cnn, "-o", b, "--outputs", "logits", "--stop-at", "act")[0] == 0
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.slow
@pytest.mark.torch
def test_convert_input_without_a_name_says_how_to_write_it(tmp_path, capsys):
    src = tmp_path / "net.py"
    src.write_text("import torch\n\ndef build():\n    return torch.nn.Conv2d(3, 4, 3)\n")
    code, _, err = run(capsys, "convert", "torch", f"{src}:build", "-o", tmp_path / "n.onnx",
                       "--input", "1x3x32x32")
    assert code == 2
    assert err == ("onnxsurgeon: error: input spec '1x3x32x32' is a shape without a name; write "
                   "NAME:SHAPE, e.g. x:1x3x32x32 (or x:1x3x32x32:float32)\n")


@pytest.mark.slow
@pytest.mark.tf
@pytest.mark.torch
def test_a_torch_function_passed_as_tf_is_a_clean_error(cnn, tmp_path, capsys):
    proc = tmp_path / "proc.py"
    proc.write_text("import torch\n\ndef normalize(a):\n"
                    "    return torch.nn.functional.normalize(a, dim=1)\n")
    out = tmp_path / "o.onnx"
    code, _, err = run(capsys, "insert", cnn, "-o", out, "--at", "act", "--func",
                       f"{proc}:normalize", "--framework", "tf")
    assert code == 2 and not out.exists()
    assert err.startswith("onnxsurgeon: error: the tf export of function 'normalize' failed (")
    assert err.rstrip().endswith("check that it is written in TensorFlow and takes one tensor "
                                 "(--framework torch if it is torch code)")
    assert "internal error" not in err and len(err.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.torch
def test_an_export_failure_of_insert_func_advises_a_flag_insert_has(tmp_path):
    """insert has --exporter (not --opset: the block takes the host model's opset)."""
    from tests.cli_helpers import cli

    bad = tmp_path / "bad.py"
    bad.write_text("def f(x):\n    return x * 2 if x.sum().item() > 0 else x\n")  # data-dependent
    torch_cnn = ROOT / "models" / "torch_cnn.onnx"   # opset 18: dynamo by default
    out = tmp_path / "o.onnx"
    proc = cli("insert", torch_cnn, "-o", out, "--at", "conv5", "--func", f"{bad}:f",
               "--framework", "torch")
    err = proc.stderr
    assert proc.returncode == 2 and not out.exists() and len(err.splitlines()) == 1, err
    assert err.startswith("onnxsurgeon: error: torch.onnx (dynamo) could not export function 'f': ")
    assert err.endswith("; try --exporter torchscript\n") and "_Wrap" not in err
    good = tmp_path / "good.py"
    good.write_text("import torch\n\ndef f(x):\n    return torch.relu(x) * 2\n")
    proc = cli("insert", torch_cnn, "-o", out, "--at", "conv5", "--func", f"{good}:f",
               "--framework", "torch", "--exporter", "torchscript")
    assert (proc.returncode, proc.stderr) == (0, "") and proc.stdout.startswith("inserted at conv5: ")


@pytest.mark.slow
@pytest.mark.torch
def test_convert_is_quiet_and_readable(tmp_path):
    """Framework log noise is captured (shown with -v); the summary is text, not an object dump."""
    import subprocess
    import sys

    src = tmp_path / "net.py"
    src.write_text("import torch\n\ndef build():\n    torch.manual_seed(0)\n"
                   "    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())\n")
    out = tmp_path / "n.onnx"
    proc = subprocess.run([sys.executable, "-m", "onnxsurgeon", "convert", "torch",
                           f"{src}:build", "-o", str(out), "--input", "x:1x3x8x8"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("converted pytorch ") and lines[0].endswith(f"-> {out}")
    assert lines[1:4] == ["  inputs  x", "  outputs " + lines[2].split()[-1],
                          lines[3]] and lines[3].startswith("  check   max |diff| vs pytorch ")
    assert "ConversionReport(" not in proc.stdout and "PosixPath" not in proc.stdout


def _option_defaults() -> list[tuple[str, str, str, str]]:
    """(command, flag, default, that flag's --help entry) for every flag of every (sub)command
    that has a default; the entry is rendered by the parser's own --help formatter."""
    import argparse

    from onnxsurgeon.cli import build_parser

    found, stack = [], [("", build_parser())]
    while stack:
        name, parser = stack.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend((f"{name} {sub}".strip(), p) for sub, p in action.choices.items())
            elif (action.option_strings and name and action.nargs != 0
                  and action.default not in (None, [], argparse.SUPPRESS)):
                entry = " ".join(parser._get_formatter()._format_action(action).split())
                found.append((name, action.option_strings[0], str(action.default), entry))
    return sorted(found)


@pytest.mark.parametrize("command, flag, default, entry", _option_defaults(),
                         ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "")
def test_every_flag_with_a_default_shows_it_in_help(capsys, command, flag, default, entry):
    """Every flag of every command that has a default says it in its --help entry."""
    flat = " ".join(run(capsys, *command.split(), "--help")[1].split())
    assert entry in flat
    assert any(f"default{sep}{default}" in entry for sep in (": ", " ")), entry


@pytest.mark.parametrize("argv, want", [
    (["verify", "A", "B", "--threads", "0"], "expected a positive whole number, got '0'"),
    (["insert", "A", "-o", "B", "--at", "t", "--op", "identity", "--verify-threads", "0"],
     "expected a positive whole number, got '0'"),
    (["verify", "A", "B", "--memory-limit", "0"], "expected a positive whole number of MB"),
    (["fold", "A", "-o", "B", "--max-bytes", "x"], "expected a size in bytes >= 0"),
])
def test_a_whole_number_flag_names_what_it_counts(capsys, argv, want):
    """Threads are counted as threads, not MB (both once shared one message)."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and want in err, err
    assert ("MB" in err) == ("MB" in want), err


@pytest.mark.parametrize("argv, want", [
    (["verify", "{m}", "{m}", "--seed", "-5"], "--seed: expected a whole number >= 0"),
    (["cleanup", "{m}", "-o", "{o}", "--verify", "--verify-seed", "-1"],
     "--verify-seed: expected a whole number >= 0"),
    (["cleanup", "{m}", "-o", "{o}", "--verify", "--verify-rtol", "nan"],
     "--verify-rtol: expected a finite number >= 0"),
    (["cleanup", "{m}", "-o", "{o}", "--verify", "--verify-atol=-1e-3"],
     "--verify-atol: expected a finite number >= 0"),
    (["verify", "{m}", "{m}", "--rtol", "inf"], "--rtol: expected a finite number >= 0"),
    (["cleanup", "{m}", "-o", "{o}", "--verify", "--range", "0,inf"], "with finite LO < HI"),
    (["replace", "{m}", "-o", "{o}", "--pattern", "p", "--replacement", "r", "--verify",
      "--tolerance", "nan,nan"], "--tolerance: tolerances must be finite numbers >= 0"),
])
def test_seeds_tolerances_and_ranges_out_of_domain_are_exit_2(cnn, tmp_path, capsys, argv, want):
    """A negative seed was exit 3 (numpy's ValueError); a NaN, negative or infinite tolerance or
    range bound was taken, and the check ended inconclusive (exit 1) or failed every pair."""
    out = tmp_path / "out.onnx"
    code, _, err = run(capsys, *[a.format(m=cnn, o=out) for a in argv])
    assert code == 2 and err.count("\n") == 1 and want in err, err
    assert not out.exists()
