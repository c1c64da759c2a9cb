"""Shell completion scripts generated from the command's own argparse parser (bash; zsh through bashcompinit)."""

from __future__ import annotations

import argparse

from ..command import Command, Invocation
from ..session import EXIT_OK


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(option for action in parser._actions for option in action.option_strings)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def bash_script(parser: argparse.ArgumentParser, program: str = "areal-workers") -> str:
    commands = _subcommands(parser)
    function = "_" + program.replace("-", "_")
    cases = "\n".join(f'        {name}) opts="{" ".join(_options(sub))}" ;;' for name, sub in commands.items())
    return f"""# {program} completion for bash (zsh: autoload -U +X bashcompinit && bashcompinit first)
{function}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" sub="" word opts
    local commands="{" ".join(commands)}"
    for word in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case " $commands " in *" $word "*) sub="$word"; break ;; esac
    done
    if [ -z "$sub" ]; then
        COMPREPLY=( $(compgen -W "$commands {" ".join(_options(parser))}" -- "$cur") )
        return
    fi
    case "$sub" in
{cases}
    esac
    COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
}}
complete -F {function} {program}
"""


def zsh_script(parser: argparse.ArgumentParser, program: str = "areal-workers") -> str:
    return "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser, program)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=("bash", "zsh"))


def _run(call: Invocation) -> int:
    print(bash_script(call.parser) if call.args.shell == "bash" else zsh_script(call.parser), end="")
    return EXIT_OK


COMMANDS = (
    Command(
        "completion",
        "print a shell completion script",
        "  source <(areal-workers completion bash)\n  areal-workers completion zsh > ~/.zfunc/_areal-workers",
        _run,
        _arguments,
        uses_cluster=False,
    ),
)
