"""Reads a K3s join script out of EC2 user data and checks it is the recipe of docs/aws.md.

The instance booter (:mod:`tests.aws.booter`) stands in for an AMI booting: it
may only register a Node for an instance whose user data would really join
K3s the way karpy needs. :func:`check_k3s_join` decides that by reading the
script statically (nothing is run):

- the user data is a shell script (``#!``), as an ``amiFamily: Custom`` class
  passes it verbatim, or a MIME document whose ``text/x-shellscript`` parts
  are the script (as AL2 and AL2023 documents carry it);
- an IMDSv2 session token is fetched (``curl -X PUT .../latest/api/token``
  with the ``X-aws-ec2-metadata-token-ttl-seconds`` header), and the instance
  id and the zone are read from ``meta-data/instance-id`` and
  ``meta-data/placement/availability-zone`` *with* that token (an instance
  that requires IMDSv2 answers nothing else);
- the agent is started (``curl -sfL https://get.k3s.io | ... sh -s - agent``
  or ``k3s agent``) with ``--kubelet-arg=provider-id=aws:///$ZONE/$INSTANCE_ID``
  built from exactly those two reads, since karpy matches Nodes to NodeClaims
  by provider id, and with ``--node-taint karpenter.sh/unregistered:NoExecute``,
  which keeps pods off the node until karpy has registered it;
- the join token is the output of ``aws ssm get-parameter --with-decryption
  --name <parameter>`` and reaches the agent as ``K3S_TOKEN="$VAR"`` (or
  ``--token "$VAR"``); a literal token anywhere in the script is refused, as
  it would sit in the launch template and the EC2NodeClass in plain text;
- a ``--node-name``, if given, comes from IMDS (``local-hostname`` or
  ``instance-id``): a fixed name would be the same on every instance.

What it returns (:class:`K3sJoin`) is what the booter needs to register the
Node as K3s would: the server URL, the parameter name, the taints and labels
the agent registers with, and where the node's name comes from.

The reading is line-based: continuation lines are joined, ``NAME=$(...)``
command substitutions and ``NAME=value`` literals are tracked, and each
command line is tokenized as the shell would (``shlex``). It covers scripts
written in the recipe's plain style; a script that hides these steps in
functions or files is refused rather than guessed at.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from karpy.api.taints import EFFECTS, NO_EXECUTE, UNREGISTERED_TAINT_KEY, Taint
from karpy.cloud.aws.userdata import UserDataError, is_mime, mime_parts

IMDS_ADDRESSES = ("169.254.169.254", "[fd00:ec2::254]")
IMDS_TOKEN_PATH = "/latest/api/token"
IMDS_TTL_HEADER = "x-aws-ec2-metadata-token-ttl-seconds"
IMDS_TOKEN_HEADER = "x-aws-ec2-metadata-token"
METADATA_INSTANCE_ID = "instance-id"
METADATA_ZONE = "placement/availability-zone"
METADATA_HOSTNAME = "local-hostname"

_SUBSTITUTION = re.compile(
    r"^(?:export\s+|local\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)=\"?\$\((.*)\)\"?\s*(?:#.*)?$"
)
_ASSIGNMENT = re.compile(r"^(?:export\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VARIABLE = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")
_PROVIDER_ID = re.compile(
    r"^aws:///\$(?:\{(?P<zone_b>\w+)\}|(?P<zone>\w+))/\$(?:\{(?P<id_b>\w+)\}|(?P<id>\w+))$"
)
_SEPARATORS = frozenset({"|", "||", "&&", ";", "&"})


class K3sJoinError(ValueError):
    """The user data is not a K3s join karpy can rely on; the message says which piece is wrong."""


@dataclass(frozen=True)
class K3sJoin:
    """What a checked K3s join script does when the instance boots."""

    server_url: str
    token_parameter: str  # the SSM SecureString the join token is read from
    taints: tuple[Taint, ...]  # what the agent registers with (incl. karpenter.sh/unregistered)
    labels: dict[str, str] = field(default_factory=dict)  # --node-label values
    node_name_from: str = ""  # IMDS path of --node-name (local-hostname, instance-id), "" if not given


@dataclass
class _Script:
    """What the lines of a script define, in the order they run."""

    literals: dict[str, str] = field(default_factory=dict)
    exported: set[str] = field(default_factory=set)
    imds_tokens: set[str] = field(default_factory=set)  # variables holding an IMDSv2 session token
    metadata: dict[str, str] = field(default_factory=dict)  # variable -> IMDS path read with a token
    tokenless_reads: dict[str, str] = field(default_factory=dict)  # variable -> IMDS path read without
    ssm: dict[str, tuple[str, bool]] = field(default_factory=dict)  # variable -> (parameter, decrypted)
    agents: list[list[str]] = field(default_factory=list)  # the agent commands' tokens
    literal_token: bool = False


def shell_script(user_data: str) -> str:
    """The shell script in ``user_data``: itself, or the shell parts of a MIME document."""
    if is_mime(user_data):
        try:
            parts = mime_parts(user_data)
        except UserDataError as error:
            raise K3sJoinError(f"the user data is a MIME document karpy cannot read: {error}") from error
        scripts = [
            part.body
            for part in parts
            if any(
                name.lower() == "content-type" and value.lower().startswith("text/x-shellscript")
                for name, value in part.headers
            )
        ]
        if not scripts:
            raise K3sJoinError("the user data is a MIME document without a text/x-shellscript part")
        return "\n".join(scripts)
    if not user_data.lstrip().startswith("#!"):
        raise K3sJoinError(
            "the user data is neither a shell script (starting with #!) nor a MIME document with one"
        )
    return user_data


def _logical_lines(script: str) -> Iterator[str]:
    pending = ""
    for raw in script.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        if line and not line.startswith("#"):
            yield line
    if pending.strip():
        yield pending.strip()


def _tokens(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|;&")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError as error:  # an unclosed quote
        raise K3sJoinError(f"cannot read the shell line {text!r}: {error}") from error


def _commands(tokens: Sequence[str]) -> Iterator[list[str]]:
    command: list[str] = []
    for token in tokens:
        if token in _SEPARATORS:
            if command:
                yield command
            command = []
        else:
            command.append(token)
    if command:
        yield command


def _variable(token: str) -> str:
    """The variable ``token`` is a plain reference to (``$X``, ``${X}``), else ""."""
    match = _VARIABLE.match(token)
    return (match.group(1) or match.group(2)) if match else ""


def _expand(token: str, literals: dict[str, str]) -> str:
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)",
        lambda m: literals.get(m.group(1) or m.group(2), m.group(0)),
        token,
    )


def _option(tokens: Sequence[str], names: Sequence[str]) -> list[str]:
    """Every value of the options ``names`` in ``tokens`` (``--x v`` and ``--x=v``)."""
    values: list[str] = []
    for index, token in enumerate(tokens):
        for name in names:
            if token == name and index + 1 < len(tokens):
                values.append(tokens[index + 1])
            elif token.startswith(name + "="):
                values.append(token[len(name) + 1 :])
    return values


def _imds_path(url: str) -> str | None:
    for address in IMDS_ADDRESSES:
        for scheme in ("http://", "https://"):
            prefix = f"{scheme}{address}"
            if url.startswith(prefix):
                return url[len(prefix) :]
    return None


def _headers(tokens: Sequence[str]) -> dict[str, str]:
    headers = {}
    for value in _option(tokens, ("-H", "--header")):
        name, _, content = value.partition(":")
        headers[name.strip().lower()] = content.strip()
    return headers


def _read_substitution(name: str, command: list[str], script: _Script) -> None:
    """Record what ``name=$(command)`` holds: an IMDS token or value, or an SSM parameter."""
    if command and command[0] == "curl":
        methods = [m.upper() for m in _option(command, ("-X", "--request"))]
        methods += [token[2:].upper() for token in command if token.startswith("-X") and len(token) > 2]
        headers = _headers(command)
        for token in command:
            path = _imds_path(token)
            if path is None:
                continue
            if path == IMDS_TOKEN_PATH and "PUT" in methods and IMDS_TTL_HEADER in headers:
                script.imds_tokens.add(name)
            elif path.startswith("/latest/meta-data/"):
                metadata_path = path.removeprefix("/latest/meta-data/").strip("/")
                if _variable(headers.get(IMDS_TOKEN_HEADER, "")) in script.imds_tokens:
                    script.metadata[name] = metadata_path
                else:
                    script.tokenless_reads[name] = metadata_path
        return
    if command[:3] == ["aws", "ssm", "get-parameter"]:
        parameters = [_expand(value, script.literals) for value in _option(command, ("--name",))]
        script.ssm[name] = (parameters[0] if parameters else "", "--with-decryption" in command)


def _read_script(text: str) -> _Script:
    script = _Script()
    for line in _logical_lines(text):
        substitution = _SUBSTITUTION.match(line)
        if substitution:
            _read_substitution(substitution.group(1), _tokens(substitution.group(2)), script)
            if line.startswith("export "):
                script.exported.add(substitution.group(1))
            continue
        tokens = _tokens(line)
        assignment = _ASSIGNMENT.match(line)
        if assignment and len(tokens) == 1 + line.startswith(("export ", "readonly ")):
            variable, value = assignment.group(1), _tokens(assignment.group(2) or "''")
            script.literals[variable] = _expand(value[0] if value else "", script.literals)
            if line.startswith("export "):
                script.exported.add(variable)
            if variable == "K3S_TOKEN" and not _variable(assignment.group(2).strip("\"'")):
                script.literal_token = True
            continue
        for command in _commands(tokens):
            if _is_agent(command):
                script.agents.append(command)
    return script


def _is_agent(command: list[str]) -> bool:
    words = [token for token in command if "=" not in token or token.startswith("-")]
    if words[:4] == ["sh", "-s", "-", "agent"]:
        return True
    return bool(words) and words[0].split("/")[-1] == "k3s" and words[1:2] == ["agent"]


def _agent_environment(agent: list[str], script: _Script) -> dict[str, str]:
    """The K3S_* variables the agent command sees: its own assignments, else exported ones."""
    environment = {name: script.literals.get(name, f"${name}") for name in script.exported}
    for token in agent:
        name, equals, value = token.partition("=")
        if equals and re.fullmatch(r"[A-Za-z_]\w*", name):
            environment[name] = value
    return environment


def _agent_arguments(agent: list[str]) -> list[str]:
    return agent[agent.index("agent") + 1 :]


def _taint(text: str) -> Taint:
    key_value, _, effect = text.rpartition(":")
    key, _, value = key_value.partition("=")
    if not key or effect not in EFFECTS:
        raise K3sJoinError(f"--node-taint {text!r} is not key[=value]:Effect")
    return Taint(key, effect, value)


def _provider_id(arguments: list[str], script: _Script) -> None:
    provider_ids = [
        value.removeprefix("provider-id=")
        for value in _option(arguments, ("--kubelet-arg",))
        if value.startswith("provider-id=")
    ]
    if not script.imds_tokens:
        raise K3sJoinError(
            "no IMDSv2 session token is fetched: the script must PUT "
            f"http://169.254.169.254{IMDS_TOKEN_PATH} with the X-aws-ec2-metadata-token-ttl-seconds header"
        )
    if not provider_ids:
        raise K3sJoinError(
            "the agent is not given the provider id: pass --kubelet-arg=provider-id=aws:///$ZONE/$INSTANCE_ID"
        )
    match = _PROVIDER_ID.match(provider_ids[-1])
    if match is None:
        raise K3sJoinError(
            f"the provider id {provider_ids[-1]!r} is not aws:///$ZONE/$INSTANCE_ID built from two variables"
        )
    for variable, wanted in (
        (match.group("zone") or match.group("zone_b"), METADATA_ZONE),
        (match.group("id") or match.group("id_b"), METADATA_INSTANCE_ID),
    ):
        if script.metadata.get(variable) != wanted:
            how = (
                "it is read from IMDS without the IMDSv2 token header (X-aws-ec2-metadata-token)"
                if script.tokenless_reads.get(variable) == wanted
                else "it is not read from IMDS"
            )
            raise K3sJoinError(
                f"the provider id uses ${variable}, which must hold meta-data/{wanted} read with the IMDSv2 "
                f"token, but {how}"
            )


def _token_parameter(agent: list[str], environment: dict[str, str], script: _Script) -> str:
    tokens = [environment["K3S_TOKEN"]] if "K3S_TOKEN" in environment else []
    tokens += _option(_agent_arguments(agent), ("--token", "-t"))
    if script.literal_token or any(not _variable(token) for token in tokens):
        raise K3sJoinError(
            "a literal K3S_TOKEN value is in the user data: read the join token at boot with "
            "aws ssm get-parameter --with-decryption instead"
        )
    if not tokens:
        raise K3sJoinError('no join token is given to the agent (K3S_TOKEN="$TOKEN" or --token)')
    variable = _variable(tokens[-1])
    if variable not in script.ssm:
        raise K3sJoinError(
            f"the join token ${variable} is not read with "
            "aws ssm get-parameter --with-decryption --name <parameter>"
        )
    parameter, decrypted = script.ssm[variable]
    if not decrypted:
        raise K3sJoinError(
            f"the join token ${variable} is read from SSM without --with-decryption: a SecureString "
            "would reach the agent encrypted"
        )
    if not parameter or "$" in parameter:
        raise K3sJoinError(
            f"the SSM parameter of the join token ${variable} is not named (--name <parameter>)"
        )
    return parameter


def check_k3s_join(user_data: str) -> K3sJoin:
    """The K3s join ``user_data`` performs, or :class:`K3sJoinError` saying what is missing."""
    script = _read_script(shell_script(user_data))
    if not script.agents:
        raise K3sJoinError(
            "no K3s agent is started: expected curl -sfL https://get.k3s.io | ... sh -s - agent ... "
            "or k3s agent ..."
        )
    agent = script.agents[-1]
    arguments = _agent_arguments(agent)
    environment = _agent_environment(agent, script)
    _provider_id(arguments, script)
    taints = tuple(_taint(_expand(value, script.literals)) for value in _option(arguments, ("--node-taint",)))
    if Taint(UNREGISTERED_TAINT_KEY, NO_EXECUTE) not in taints:
        raise K3sJoinError(
            f"the agent does not register with the taint {UNREGISTERED_TAINT_KEY}:{NO_EXECUTE} "
            f"(--node-taint {UNREGISTERED_TAINT_KEY}:{NO_EXECUTE})"
        )
    parameter = _token_parameter(agent, environment, script)
    servers = [environment["K3S_URL"]] if "K3S_URL" in environment else []
    servers += _option(arguments, ("--server", "-s"))
    server = _expand(servers[-1], script.literals) if servers else ""
    if not server.startswith("https://") or "$" in server:
        raise K3sJoinError(
            f"no K3s server URL (K3S_URL or --server, https://<server>:6443) is set: {server!r}"
        )
    labels = {}
    for value in _option(arguments, ("--node-label",)):
        key, _, label_value = _expand(value, script.literals).partition("=")
        labels[key] = label_value
    node_name_from = ""
    names = _option(arguments, ("--node-name",))
    if names:
        node_name_from = script.metadata.get(_variable(names[-1]), "")
        if node_name_from not in (METADATA_HOSTNAME, METADATA_INSTANCE_ID):
            raise K3sJoinError(
                f"--node-name {names[-1]!r} is not read from IMDS (local-hostname or instance-id): "
                "a fixed name would be the same on every instance"
            )
    return K3sJoin(
        server_url=server,
        token_parameter=parameter,
        taints=taints,
        labels=labels,
        node_name_from=node_name_from,
    )
