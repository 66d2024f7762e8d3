"""The container image's build recipe: what the chart and CI rely on, read from the Dockerfile.

Building the image needs buildah or Docker (``make image-test``, run by CI, builds it and runs
karpy inside it); these checks need neither. They hold the promises other files make about the
image: the chart's securityContext runs it as uid 65532 with runAsNonRoot, so the runtime
stage's USER must be that numeric uid; ``karpy run`` is what a bare ``docker run`` starts; the
environment comes from uv.lock unchanged (``--locked``) without the dev tools; the versions
written into the Dockerfile are the project's; and the build context holds what the
Dockerfile copies and nothing else (no .venv, no .tools, no caches).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"

NONROOT = "65532"


@dataclass
class Stage:
    base: str
    name: str = ""
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, instruction: str) -> list[str]:
        return [rest for name, rest in self.instructions if name == instruction]

    def env(self) -> dict[str, str]:
        return dict(word.split("=", 1) for rest in self.args("ENV") for word in shlex.split(rest))


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continued lines joined."""
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends in a continued line"
    pairs = []
    for entry in logical:
        name, _, rest = entry.strip().partition(" ")
        pairs.append((name.upper(), " ".join(rest.split())))
    return pairs


def parse() -> tuple[dict[str, str], list[Stage]]:
    """The global ARG defaults (before the first FROM) and the stages in order."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for name, rest in instructions(DOCKERFILE.read_text()):
        if name == "FROM":
            words = rest.split()
            stages.append(Stage(base=words[0], name=words[2] if len(words) == 3 else ""))
        elif stages:
            stages[-1].instructions.append((name, rest))
        elif name == "ARG":
            key, _, default = rest.partition("=")
            global_args[key] = default
    return global_args, stages


def arg_default(stage: Stage, key: str) -> str:
    defaults = dict(rest.partition("=")[::2] for rest in stage.args("ARG"))
    return defaults[key]


def test_two_stages_on_one_overridable_base() -> None:
    global_args, stages = parse()
    assert [stage.base for stage in stages] == ["${BASE_IMAGE}", "${BASE_IMAGE}"]
    assert stages[0].name == "builder"
    # The venv's interpreter link points into the base: Debian bookworm's Python 3.11.
    assert re.fullmatch(r"python:3\.11-slim-bookworm", global_args["BASE_IMAGE"])


def test_the_runtime_stage_runs_karpy_run_as_the_charts_non_root_uid() -> None:
    runtime = parse()[1][-1]
    assert runtime.args("USER") == [f"{NONROOT}:{NONROOT}"]
    assert json.loads(runtime.args("ENTRYPOINT")[0]) == ["karpy"]
    assert json.loads(runtime.args("CMD")[0]) == ["run"]
    (create_user,) = runtime.args("RUN")
    assert f"--uid {NONROOT}" in create_user
    assert f"--gid {NONROOT}" in create_user


def test_the_runtime_stage_writes_nothing_and_copies_only_the_venv() -> None:
    builder, runtime = parse()[1]
    assert runtime.env()["PYTHONDONTWRITEBYTECODE"] == "1"
    assert runtime.env()["PATH"].startswith("/app/.venv/bin:")
    # Bytecode is compiled in the builder instead, so nothing needs writing at start.
    assert builder.env()["UV_COMPILE_BYTECODE"] == "1"
    assert runtime.args("COPY") == ["--from=builder /app/.venv /app/.venv"]
    assert builder.env()["UV_PROJECT_ENVIRONMENT"] == "/app/.venv"


def test_the_venv_is_the_lock_without_dev_tools_and_karpy_not_editable() -> None:
    builder = parse()[1][0]
    syncs = [run for run in builder.args("RUN") if " sync " in f"{run} "]
    assert len(syncs) == 2
    for sync in syncs:
        assert "--locked" in sync.split()
        assert "--no-dev" in sync.split()
    assert "--no-editable" in syncs[-1].split()
    assert "--no-install-project" in syncs[0].split()


def test_the_versions_in_the_dockerfile_are_the_projects() -> None:
    builder, runtime = parse()[1]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert arg_default(runtime, "KARPY_VERSION") == pyproject["project"]["version"]
    makefile_uv = re.search(r"^UV_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert makefile_uv is not None
    assert arg_default(builder, "UV_VERSION") == makefile_uv.group(1)
    assert 'org.opencontainers.image.version="${KARPY_VERSION}"' in runtime.args("LABEL")[0]


def test_the_build_context_is_exactly_what_the_dockerfile_copies() -> None:
    copied: set[str] = set()
    for stage in parse()[1]:
        for rest in stage.args("COPY"):
            if not rest.startswith("--from="):
                copied.update(Path(source).as_posix() for source in rest.split()[:-1])
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # Everything is ignored first; the exceptions are the sources the Dockerfile copies.
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == copied == {"pyproject.toml", "uv.lock", "README.md", "src"}


def test_the_image_script_checks_what_the_dockerfile_sets() -> None:
    runtime = parse()[1][-1]
    script = (ROOT / "scripts" / "image").read_text()
    expected = " ".join(
        [runtime.args("USER")[0], runtime.args("ENTRYPOINT")[0].replace(" ", ""), runtime.args("CMD")[0]]
    )
    assert f"[[ \"$config\" == '{expected}' ]]" in script
