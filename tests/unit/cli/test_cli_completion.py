"""The shell completion scripts come from the parser itself: every subcommand and its options, nothing else; the
bash script is run in bash to see what it completes."""

from __future__ import annotations

import argparse
import shutil
import subprocess

import pytest

from areal_workers.cli.commands.completion import bash_script, zsh_script


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="areal-workers")
    top.add_argument("--kubeconfig")
    subs = top.add_subparsers(dest="command")
    status = subs.add_parser("status")
    status.add_argument("--namespace", "-n")
    status.add_argument("--json", action="store_true")
    subs.add_parser("down").add_argument("--wait", action="store_true")
    return top


def test_each_subcommand_completes_its_own_options_sorted():
    script = bash_script(parser())
    assert 'local commands="status down"' in script
    assert 'status) opts="--help --json --namespace -h -n" ;;' in script
    assert 'down) opts="--help --wait -h" ;;' in script
    assert "complete -F _areal_workers areal-workers" in script


def test_the_program_name_makes_the_function_name():
    script = bash_script(parser(), program="my-tool")
    assert script.splitlines()[1] == "_my_tool() {" and script.rstrip().endswith("complete -F _my_tool my-tool")


def test_a_parser_without_subcommands_completes_its_options_only():
    plain = argparse.ArgumentParser()
    plain.add_argument("--verbose")
    script = bash_script(plain)
    assert 'local commands=""' in script and "--verbose" in script


def test_zsh_loads_bashcompinit_before_the_bash_script():
    assert zsh_script(parser()) == "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser())


def complete(words: list[str]) -> list[str]:
    program = bash_script(parser()) + (
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        '_areal_workers; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    result = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return sorted(result.stdout.split())


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_first_then_the_chosen_commands_options():
    assert complete(["areal-workers", ""]) == sorted(["status", "down", "--help", "--kubeconfig", "-h"])
    assert complete(["areal-workers", "st"]) == ["status"]
    assert complete(["areal-workers", "status", "--"]) == ["--help", "--json", "--namespace"]
    assert complete(["areal-workers", "--kubeconfig", "k", "down", "--w"]) == ["--wait"]
