"""The command line as a user meets it: help, mistakes, and what each command says."""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path

import pytest

from exporter.commands import COMMANDS, build_parser, main
from exporter.commands import demo as demo_command
from exporter.commands.common import RENAMED_FLAGS, agent_config
from exporter.probe import ProbeConfig, open_probe


def _all_parsers(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [p]
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _all_parsers(sub)
    return out


def test_top_level_help_shows_the_exporter_flags_and_the_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What `./scripts/run.sh --help` prints: without a command the exporter runs."""
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--web.listen-address", "--sampler.interval", "--no-probe", "--kubernetes"):
        assert flag in out
    for c in COMMANDS:
        assert c.name in out


def test_a_mistyped_command_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["finding"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'finding'" in err and "'findings'" in err and "'diagnose'" in err


@pytest.mark.parametrize("group", ["rules", "dashboards"])
def test_a_group_without_its_subcommand_shows_its_usage(
    group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([group]) == 2
    assert "generate" in capsys.readouterr().err


def test_help_texts_are_plain_text() -> None:
    """No reStructuredText in what --help prints (``literal``, :data:`x`...)."""
    rst = re.compile(r"``|:(data|func|class|meth|mod):`")
    for p in _all_parsers(build_parser()):
        texts = [p.description or "", p.epilog or ""]
        texts += [a.help or "" for a in p._actions]
        for t in texts:
            assert not rst.search(t), f"{p.prog}: {t}"


def test_flags_become_typed_settings() -> None:
    args = build_parser().parse_args(
        ["run", "--no-probe", "--probe.top-k", "5", "--sampler.interval", "2"]
    )
    cfg = agent_config(args)
    assert cfg.probe == ProbeConfig(enabled=False, top_k=5)
    assert cfg.sample_interval == 2.0 and cfg.kube.enabled is False
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--probe.top-k", "0"])


OLD_SPELLINGS = [
    # (command, old flag, value) -> the same setting as the new flag
    (["run"], "--sample-interval", "2"),
    (["run"], "--metadata-file", "m.yaml"),
    (["run"], "--config", "t.yaml"),
    (["run"], "--kubeconfig", "k.yaml"),
    (["run"], "--node-name", "n1"),
    (["diagnose"], "--sample-interval", "2"),
    (["rules", "generate"], "--out-dir", "out"),
    (["rules", "generate"], "--config", "t.yaml"),
    (["dashboards", "generate"], "--out-dir", "out"),
    (["demo"], "--config", "t.yaml"),
]


@pytest.mark.parametrize(("command", "old", "value"), OLD_SPELLINGS)
def test_a_renamed_flag_still_works_under_its_old_name(
    command: list[str], old: str, value: str
) -> None:
    """For one release the old spelling sets what the new one sets (CHANGELOG)."""
    new = RENAMED_FLAGS[old]
    by_new = vars(build_parser().parse_args([*command, new, value]))
    by_old = vars(build_parser().parse_args([*command, old, value]))
    assert by_old.pop("renamed_flags") == [old]
    assert by_old == by_new
    assert "renamed_flags" not in by_new


def test_an_old_flag_spelling_is_warned_about_naming_the_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "t.yaml"
    cfg.write_text("stallSome: 0.3\n")
    with caplog.at_level(logging.WARNING):
        assert main(["rules", "print", "config", "--config", str(cfg)]) == 0
    (rec,) = [r for r in caplog.records if "deprecated" in r.getMessage()]
    assert rec.levelno == logging.WARNING
    assert rec.getMessage() == (
        "flag --config is deprecated and will be removed in the next release: " "use --config.file"
    )
    assert "stallSome: 0.3" in capsys.readouterr().out  # and the file was read
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["rules", "print", "config", "--config.file", str(cfg)]) == 0
    assert not [r for r in caplog.records if "deprecated" in r.getMessage()]


def test_old_flag_spellings_are_not_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    for p in _all_parsers(build_parser()):
        text = p.format_help()
        for old in RENAMED_FLAGS:
            assert not re.search(rf"{re.escape(old)}\b(?![.])", text), (p.prog, old)


def test_probe_loader_flags_reach_the_probe_settings() -> None:
    """--probe.loader: auto by default; core and bcc force one; anything else is a usage
    error (argparse exits 2). --probe.btf: the BTF the CO-RE object is relocated against."""
    parse = build_parser().parse_args
    assert agent_config(parse(["run"])).probe == ProbeConfig()
    assert ProbeConfig().loader == "auto" and ProbeConfig().btf_path == "/sys/kernel/btf/vmlinux"
    cfg = agent_config(parse(["run", "--probe.loader", "bcc", "--probe.btf", "/x"])).probe
    assert (cfg.loader, cfg.btf_path) == ("bcc", "/x")
    with pytest.raises(SystemExit):
        parse(["run", "--probe.loader", "ebpf"])
    with pytest.raises(ValueError, match="loader"):
        ProbeConfig(loader="ebpf")


def test_optional_collectors_are_off_unless_asked_for() -> None:
    """--collector.<name> / --no-collector.<name>, node_exporter's flags, for the
    families cAdvisor and kube-state-metrics already export (docs/metrics.md)."""
    from exporter.catalog import OPTIONAL_COLLECTORS

    assert agent_config(build_parser().parse_args(["run"])).collectors == frozenset()
    args = build_parser().parse_args(
        ["run", "--collector.cpu_spec", "--collector.io_pressure", "--no-collector.io_pressure"]
    )
    assert agent_config(args).collectors == {"cpu_spec"}
    every = [f"--collector.{n}" for n in OPTIONAL_COLLECTORS]
    assert agent_config(build_parser().parse_args(["run", *every])).collectors == set(
        OPTIONAL_COLLECTORS
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--collector.bogus"])


def test_no_probe_is_news_not_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    probe = open_probe(ProbeConfig(enabled=False))
    assert probe.status.reason == "disabled"
    (rec,) = [r for r in caplog.records if "not loaded" in r.getMessage()]
    assert rec.levelno == logging.INFO


def test_demo_from_an_installed_package_says_it_needs_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo_command.import_labs_demo(tmp_path) is None  # no labs/ next to it
    monkeypatch.setattr(demo_command, "checkout_root", lambda: tmp_path)
    assert main(["demo", "--list"]) == 2
    assert "needs a source checkout" in capsys.readouterr().err


def test_demo_lists_the_labs_from_this_checkout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--list"]) == 0
    out = capsys.readouterr().out
    assert "noisy-neighbor" in out and "memory-pressure" in out


def test_the_exporter_does_not_import_what_only_other_commands_use() -> None:
    """Every command's parser is built at start: the rule pack, the self-test's run and
    bcrypt are imported where they are used, not by the exporter (bench/README.md: ≈ 1
    MB of RSS)."""
    import subprocess
    import sys

    lazy = ("exporter.rules.pack", "exporter.selftest.run", "exporter.yamlout", "bcrypt")
    code = (
        "import sys; from exporter.commands import build_parser; build_parser(); "
        f"print([m for m in {lazy!r} if m in sys.modules])"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.stdout.strip() == "[]", out.stderr


def test_tune_malloc_leaves_a_threshold_the_environment_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from exporter.commands import run

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert run.tune_malloc() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")
    assert run.tune_malloc() is False


def test_tune_malloc_sets_glibc_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """On glibc (the test machines, the image), mallopt takes it; elsewhere it is a no."""
    import platform

    from exporter.commands import run

    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert run.tune_malloc() is (platform.libc_ver()[0] == "glibc")


def test_ctrl_c_before_a_command_takes_sigint_over_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while the probe loads (seconds, before `run` handles SIGINT) ends the
    process as the shell expects, with one line, not a traceback."""
    from exporter.commands import run as run_command

    def interrupted(_args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_command, "cmd_run", interrupted)
    assert main([]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "contention-exporter: interrupted" and "Traceback" not in err
