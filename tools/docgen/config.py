#!/usr/bin/env python3
"""Generates the configuration reference, docs/en/configuration.md and docs/zh/configuration.md, from the code.

Three sources, so the pages cannot drift from what the adapter and the chart do:

- the environment variables `KubernetesSchedulerConfig.from_env` reads: `config.ENVIRONMENT` (variable -> field),
  `config.NAMESPACE_FALLBACK_VARIABLE` and `config.ENVIRONMENT_PARSERS` (the first docstring line of a field's
  parser is the variable's format), all of which `from_env` itself uses;
- the fields of `KubernetesSchedulerConfig`: their types, defaults and the `Attributes:` section of its docstring
  (every field must be described there);
- the chart's values: the rows docgen.chart builds from values.yaml and values.schema.json.

The prose around the tables is below, in both languages; the descriptions in the tables are the code's own text
(English in both pages). Usage: python -m docgen.config [--check]  (--check: exit 1 if a page is out of date)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docgen.chart as chart_docs
from areal_workers import config as config_module
from docgen.generated_files import write_or_check
from repo_paths import REPO

PAGES = {"en": REPO / "docs" / "en" / "configuration.md", "zh": REPO / "docs" / "zh" / "configuration.md"}
REGENERATE = "make docs  (or: .venv/bin/python -m docgen.config)"
CHART_README = "../../charts/areal-workers/README.md"  # from docs/<lang>/
PACKAGE_DIR = Path(config_module.__file__).resolve().parent
CONFIG_CLASS = config_module.KubernetesSchedulerConfig


class ConfigDocsError(Exception):
    """The code does not describe every option, or describes one that does not exist."""


# --- KubernetesSchedulerConfig -------------------------------------------------------------------------------

ATTRIBUTE = re.compile(r"^(?P<names>[a-z_][a-z0-9_]*(?: / [a-z_][a-z0-9_]*)*): (?P<text>.*)$")


def attribute_docs(cls: type = CONFIG_CLASS) -> dict[str, str]:
    """Field name -> its description from the `Attributes:` section of the class docstring. An entry may name
    several fields (`kubeconfig / context: ...`); continuation lines are indented deeper than the entry."""
    doc = (cls.__doc__ or "").expandtabs()
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        raise ConfigDocsError(f"{cls.__name__}'s docstring has no `Attributes:` section") from None
    docs: dict[str, str] = {}
    names: list[str] = []
    entry_indent: int | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        if indent == entry_indent:
            match = ATTRIBUTE.match(line.strip())
            if match is None:
                raise ConfigDocsError(f"{cls.__name__} docstring: cannot read the attribute line {line.strip()!r}")
            names = match["names"].split(" / ")
            for name in names:
                if name in docs:
                    raise ConfigDocsError(f"{cls.__name__} docstring: {name} is described twice")
                docs[name] = match["text"].strip()
        elif indent > entry_indent and names:
            for name in names:
                docs[name] += " " + line.strip()
        else:
            break
    return docs


def type_text(hint: Any) -> str:
    """A field's type as readers of Python read it: `str` or `None`, `process` | `pod`, tuple of `str`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return " | ".join(f"`{value}`" for value in args)
    if origin is typing.Union or type(hint).__name__ == "UnionType":
        return " or ".join(type_text(arg) for arg in args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"tuple of {type_text(args[0])}"
    if origin is not None and getattr(origin, "__name__", "") == "Mapping":
        return f"mapping of {type_text(args[0])} to {type_text(args[1])}"
    if hint is type(None):
        return "`None`"
    return f"`{getattr(hint, '__name__', str(hint))}`"


def default_text(field: dataclasses.Field) -> str:
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = field.default_factory()  # type: ignore[misc]
    else:
        value = field.default
    if isinstance(value, str) and Path(value).is_absolute():
        path = Path(value)
        if path.is_relative_to(PACKAGE_DIR):  # the chart inside the package: not this machine's path
            return f"`{PACKAGE_DIR.name}/{path.relative_to(PACKAGE_DIR).as_posix()}`"
    if isinstance(value, str):
        return f"`{json.dumps(value)}`"
    if isinstance(value, Mapping):
        return f"`{dict(value)!r}`"
    return f"`{value!r}`"


def variables_by_field() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for variable, name in config_module.ENVIRONMENT.items():
        found.setdefault(name, []).append(variable)
    found.setdefault("namespace", []).append(config_module.NAMESPACE_FALLBACK_VARIABLE)
    return found


@dataclasses.dataclass(frozen=True)
class Option:
    name: str
    type: str
    default: str
    variables: tuple[str, ...]
    description: str


def options(cls: type = CONFIG_CLASS) -> list[Option]:
    docs = attribute_docs(cls)
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    names = [field.name for field in dataclasses.fields(cls)]
    problems = [
        f"{name}: not described in the `Attributes:` section of {cls.__name__}'s docstring"
        for name in names
        if not docs.get(name)
    ]
    problems += [
        f"{name}: described in {cls.__name__}'s docstring, but it is not a field" for name in docs if name not in names
    ]
    if problems:
        raise ConfigDocsError("undocumented or unknown options:\n  " + "\n  ".join(problems))
    variables = variables_by_field()
    return [
        Option(
            field.name,
            type_text(hints[field.name]),
            default_text(field),
            tuple(variables.get(field.name, ())),
            docs[field.name],
        )
        for field in dataclasses.fields(cls)
    ]


# --- environment variables -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Variable:
    name: str
    field: str
    format: str | None  # None: the text as it is


def variables() -> list[Variable]:
    fields = {field.name for field in dataclasses.fields(CONFIG_CLASS)}
    found = []
    for variable, name in config_module.ENVIRONMENT.items():
        if name not in fields:
            raise ConfigDocsError(f"ENVIRONMENT maps {variable} to {name}, which is not a field")
        parser = config_module.ENVIRONMENT_PARSERS.get(name)
        found.append(Variable(variable, name, _first_line(parser) if parser is not None else None))
    unknown = set(config_module.ENVIRONMENT_PARSERS) - set(config_module.ENVIRONMENT.values())
    if unknown:
        raise ConfigDocsError(f"ENVIRONMENT_PARSERS has parsers for fields no variable sets: {sorted(unknown)}")
    return found


def _first_line(function: Any) -> str:
    doc = (function.__doc__ or "").strip()
    if not doc:
        raise ConfigDocsError(f"{function.__name__} has no docstring: its first line is the variable's format")
    line = doc.splitlines()[0].strip().rstrip(".")
    return line[0].lower() + line[1:] if line[:2].istitle() else line


# --- the pages -----------------------------------------------------------------------------------------------

TEXT = {
    "en": {
        "title": "# Configuration reference",
        "intro": """\
Everything that configures areal-workers, in three layers: the environment variables the adapter reads, the
options of `KubernetesSchedulerConfig`, and the values of the chart. This page is generated by `make docs`
(`tools/docgen/config.py`) from the code: `KubernetesSchedulerConfig` (its fields and docstring) and the variable
table its `from_env` uses in `adapter/areal_workers/config.py`, and the chart's `values.yaml` and
`values.schema.json`. `tests/unit/docs/test_config_docs.py` fails when this page is out of date, when an option has
no description, or when a variable is not listed. Edit those files, not this page.

How the layers combine, from weakest to strongest:

1. defaults of `KubernetesSchedulerConfig`;
2. environment variables, read by `KubernetesSchedulerConfig.from_env()` (which `KubernetesScheduler` calls when it
   gets no `config`, as AReaL's trainers do with `scheduler.type: kubernetes`);
3. arguments of `from_env(namespace=..., ...)` (a `KubernetesSchedulerConfig(...)` built directly reads no
   environment at all);
4. for the chart: the files of `values_files`, under the values the scheduler writes (the experiment, trial and
   `cluster` block of AReaL's experiment config, the options above, and each role's `SchedulingSpec`).
""",
        "env": "## Environment variables",
        "env_intro": """\
Read by `KubernetesSchedulerConfig.from_env()`: when AReaL's trainer builds the scheduler (`scheduler.type:
kubernetes`), so an unmodified entry script run as `python -m areal_workers.launch train.py ARGS...` (or
`-m MODULE ARGS...`) is configured entirely by them; the launcher checks them before the script starts, and
`areal-workers submit` runs the trainer through it. An empty variable counts as unset. Time-outs take a duration as
kubectl and helm do (`90s`, `15m`, `1h30m`) or plain seconds.""",
        "env_header": "| variable | sets | format |",
        "text_format": "text, as it is",
        "namespace_chain": """\
The namespace is the first of: `{first}`; `{fallback}`; the namespace of the pod the controller runs in, read
from `{file}`
(Kubernetes mounts it with the service account token); else `"default"`. The other options have no variable:
when AReaL's trainer builds the scheduler, they keep their defaults.""",
        "options": "## Adapter options: `KubernetesSchedulerConfig`",
        "options_intro": """\
`from areal_workers import KubernetesSchedulerConfig`. A frozen dataclass; invalid values raise `ConfigError`
(a `ValueError`) naming the value. Times are in seconds.""",
        "options_header": "| option | type | default | variable | description |",
        "values": "## Chart values",
        "values_intro": f"""\
Every value of `charts/areal-workers`: its type (from `values.schema.json`), its default (from `values.yaml`) and
what it does. A values file given to the adapter (`values_files`) or to `helm install -f` may set any of them. Keys
marked *role* may also be set per role under `roles.<name>` (and in `forks.<name>.overrides`): a role's settings
are `workerDefaults` merged with the role's keys, maps key by key, lists and scalars replaced
([Roles, workerDefaults and the merge]({CHART_README}#roles-workerdefaults-and-the-merge)). What the chart
renders, the worker's command line and environment, and the checks beyond the schema are in the
[chart's README]({CHART_README}), which holds the same table (`tools/docgen/chart.py`).""",
        "values_header": "| key | type | default | description |",
    },
    "zh": {
        "title": "# 配置参考",
        "intro": """\
areal-workers 的全部配置，分三层：adapter 读取的环境变量、`KubernetesSchedulerConfig` 的选项，以及 chart 的配置值。
本页由 `make docs`（`tools/docgen/config.py`）根据代码生成：`adapter/areal_workers/config.py` 中的
`KubernetesSchedulerConfig`（字段及其 docstring）和它的 `from_env` 所用的变量表，以及 chart 的 `values.yaml` 与
`values.schema.json`。本页过期、某个选项缺少说明或某个变量未列出时，`tests/unit/docs/test_config_docs.py` 会失败。
请修改这些文件，而不是本页。表格中的说明取自代码原文，保留英文。

各层的合并顺序，从弱到强：

1. `KubernetesSchedulerConfig` 的默认值；
2. 环境变量，由 `KubernetesSchedulerConfig.from_env()` 读取（`KubernetesScheduler` 没有收到 `config` 时会调用它，
   AReaL 的训练器在 `scheduler.type: kubernetes` 时就是这样构造调度器的）；
3. `from_env(namespace=..., ...)` 的显式参数（直接构造的 `KubernetesSchedulerConfig(...)` 完全不读取环境变量）；
4. 对 chart 而言：`values_files` 中的文件位于调度器写入的 values 之下（AReaL 实验配置中的 experiment、trial 和
   `cluster` 块，上面的各个选项，以及每个角色的 `SchedulingSpec`）。
""",
        "env": "## 环境变量",
        "env_intro": """\
由 `KubernetesSchedulerConfig.from_env()` 读取：AReaL 的 trainer 构建调度器时
（`scheduler.type: kubernetes`）即读取，因此以 `python -m areal_workers.launch train.py ARGS...`
（或 `-m MODULE ARGS...`）运行的未修改入口脚本完全由这些变量配置；启动器在脚本开始前检查它们，
`areal-workers submit` 也通过它运行 trainer。值为空的变量视为未设置。超时可写成 kubectl 和 helm
接受的时长（`90s`、`15m`、`1h30m`），也可写成秒数。""",
        "env_header": "| 变量 | 设置的选项 | 格式 |",
        "text_format": "原样使用的文本",
        "namespace_chain": """\
命名空间取以下第一个有值的：`{first}`；`{fallback}`；控制器所在 Pod 的命名空间，读取自
`{file}`
（Kubernetes 随 ServiceAccount token 一起挂载该文件）；否则为 `"default"`。其他选项没有对应的环境变量：
由 AReaL 的训练器构造调度器时，它们保持默认值。""",
        "options": "## Adapter 选项：`KubernetesSchedulerConfig`",
        "options_intro": """\
`from areal_workers import KubernetesSchedulerConfig`。这是一个不可变的 dataclass；无效的值会抛出 `ConfigError`
（一种 `ValueError`），并指出是哪个值。时间的单位均为秒。""",
        "options_header": "| 选项 | 类型 | 默认值 | 环境变量 | 说明 |",
        "values": "## Chart 配置值",
        "values_intro": f"""\
`charts/areal-workers` 的全部配置值：类型（来自 `values.schema.json`）、默认值（来自 `values.yaml`）及其作用。
交给 adapter 的 values 文件（`values_files`）或 `helm install -f` 的文件可以设置其中任何一个。标记为 *role* 的键
也可以在 `roles.<name>` 下按角色设置（以及在 `forks.<name>.overrides` 中）：角色的设置是 `workerDefaults` 与该
角色的键合并的结果，映射逐键合并，列表和标量整体替换
（[Roles, workerDefaults and the merge]({CHART_README}#roles-workerdefaults-and-the-merge)）。chart 渲染哪些
对象、worker 的命令行和环境变量，以及 schema 之外的检查，见 [chart 的 README]({CHART_README})（英文），其中也有
同一张表（`tools/docgen/chart.py`）。""",
        "values_header": "| 键 | 类型 | 默认值 | 说明 |",
    },
}
GENERATED = (
    "<!-- generated by `make docs` (tools/docgen/config.py) from adapter/areal_workers/config.py and the "
    "chart's values.yaml and values.schema.json; edit those, not this page -->"
)


def env_table(lang: str) -> str:
    text = TEXT[lang]
    lines = [text["env_header"], "|---|---|---|"]
    for variable in variables():
        shown = variable.format if variable.format is not None else text["text_format"]
        lines.append(f"| `{variable.name}` | `{variable.field}` | {chart_docs.cell(shown)} |")
    return "\n".join(lines) + "\n"


def options_table(lang: str) -> str:
    lines = [TEXT[lang]["options_header"], "|---|---|---|---|---|"]
    for option in options():
        variables_ = ", ".join(f"`{name}`" for name in option.variables)
        lines.append(
            f"| `{option.name}` | {chart_docs.cell(option.type)} | {chart_docs.cell(option.default)} | "
            f"{variables_} | {chart_docs.cell(option.description)} |"
        )
    return "\n".join(lines) + "\n"


def values_table(lang: str, chart: Path = chart_docs.CHART) -> str:
    rows = chart_docs.rows((chart / "values.yaml").read_text(), json.loads((chart / "values.schema.json").read_text()))
    table = chart_docs.table(rows, CHART_README)
    header, rest = table.split("\n", 1)
    return TEXT[lang]["values_header"] + "\n" + rest


def page(lang: str) -> str:
    text = TEXT[lang]
    variables_ = list(config_module.ENVIRONMENT)
    first = next(name for name in variables_ if config_module.ENVIRONMENT[name] == "namespace")
    chain = text["namespace_chain"].format(
        first=first,
        fallback=config_module.NAMESPACE_FALLBACK_VARIABLE,
        file=config_module.SERVICE_ACCOUNT_NAMESPACE_FILE,
    )
    parts = [
        text["title"],
        GENERATED,
        text["intro"].rstrip("\n"),
        text["env"],
        text["env_intro"],
        env_table(lang).rstrip("\n"),
        chain,
        text["options"],
        text["options_intro"],
        options_table(lang).rstrip("\n"),
        text["values"],
        text["values_intro"],
        values_table(lang).rstrip("\n"),
    ]
    return "\n\n".join(parts) + "\n"


def expected_pages() -> dict[Path, str]:
    return {path: page(lang) for lang, path in PAGES.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is out of date; write nothing")
    args = parser.parse_args(argv)
    try:
        pages = expected_pages()
    except (ConfigDocsError, chart_docs.ChartDocsError) as error:
        print(f"docgen.config: {error}", file=sys.stderr)
        return 1
    return write_or_check(pages, args.check, "docgen.config", REGENERATE, REPO)


if __name__ == "__main__":
    sys.exit(main())
