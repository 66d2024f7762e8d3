"""The API server's limits on names, labels and integers, checked when a manifest is read.

``kubectl apply`` refuses an object whose name is not a DNS subdomain,
whose label does not have the syntax of a qualified name, or whose
``replicas`` does not fit the int32 the field is; the simulator must refuse
the same objects, or a manifest that could never reach a cluster runs there
(a replica count of 10^23 makes the simulator grow until it is killed).
The rules and their messages follow apimachinery's validation
(``IsDNS1123Subdomain``, ``IsDNS1123Label``, ``IsQualifiedName``,
``IsValidLabelValue``); only the rules, not the code, are taken from there.
"""

from __future__ import annotations

import re

INT32_MAX = 2**31 - 1
DNS1123_SUBDOMAIN_MAX = 253
DNS1123_LABEL_MAX = 63
LABEL_NAME_MAX = 63

# apimachinery's formats, as its messages print them.
DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = rf"{DNS1123_LABEL_FMT}(\.{DNS1123_LABEL_FMT})*"
QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"

_DNS1123_LABEL = re.compile(DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_FMT)
_QUALIFIED_NAME = re.compile(QUALIFIED_NAME_FMT)


def _dns1123_problem(value: str, longest: int, pattern: re.Pattern[str], what: str) -> str | None:
    if len(value) > longest:
        return f"{value[:40]!r}…: must be no more than {longest} characters"
    if not pattern.fullmatch(value):
        return (
            f"{value!r}: a lowercase RFC 1123 {what}, and must start and end with an alphanumeric character"
        )
    return None


def dns1123_subdomain_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (an object's name), or None."""
    return _dns1123_problem(
        value,
        DNS1123_SUBDOMAIN_MAX,
        _DNS1123_SUBDOMAIN,
        "subdomain must consist of lower case alphanumeric characters, '-' or '.'",
    )


def dns1123_label_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (a namespace's name), or None."""
    return _dns1123_problem(
        value,
        DNS1123_LABEL_MAX,
        _DNS1123_LABEL,
        "label must consist of lower case alphanumeric characters or '-'",
    )


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a qualified name (``[prefix/]name``), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"label key {key!r}: the prefix part must be non-empty"
    if slash and prefix:
        problem = dns1123_subdomain_problem(prefix)
        if problem is not None:
            return f"label key {key!r}: prefix part {problem}"
    if not name:
        return f"label key {key!r}: the name part must be non-empty"
    if len(name) > LABEL_NAME_MAX:
        return f"label key {key!r}: the name part must be no more than {LABEL_NAME_MAX} characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return (
            f"label key {key!r}: the name part must consist of alphanumeric characters, '-', '_' "
            "or '.', and must start and end with an alphanumeric character"
        )
    return None


def label_value_problem(key: str, value: str) -> str | None:
    """Why ``value`` is not a valid value of label ``key``, or None (the empty value is valid)."""
    if not value:
        return None
    if len(value) > LABEL_NAME_MAX:
        return f"label {key!r}: the value must be no more than {LABEL_NAME_MAX} characters"
    if not _QUALIFIED_NAME.fullmatch(value):
        return (
            f"label {key!r}: value {value!r} must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def labels_problem(labels: dict[str, str]) -> str | None:
    """The first label (in key order) that is not valid, said as the API server would, or None."""
    for key in sorted(labels):
        problem = label_key_problem(key) or label_value_problem(key, labels[key])
        if problem is not None:
            return problem
    return None
