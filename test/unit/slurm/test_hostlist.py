"""Slurm host lists as partitions and pending jobs report them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmctl.slurm import HostlistError, expand


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("", ()),
        ("vm", ("vm",)),
        ("n[1-3]", ("n1", "n2", "n3")),
        ("n[08-10]", ("n08", "n09", "n10")),
        ("n[1,3-4],login", ("n1", "n3", "n4", "login")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
        ("gpu[7]x", ("gpu7x",)),
        ("a,a,b", ("a", "b")),
        ("workers-0-[0-1]", ("workers-0-0", "workers-0-1")),
    ],
)
def test_expand(hostlist: str, names: tuple[str, ...]) -> None:
    assert expand(hostlist) == names


@pytest.mark.parametrize("hostlist", ["n[1-", "n]1[", "n[]", "n[3-1]", "n[a-b]", "n[[1]]", "n[1-1000000]"])
def test_a_bad_host_list_is_an_error_not_a_guess(hostlist: str) -> None:
    with pytest.raises(HostlistError):
        expand(hostlist)


@given(st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=20, unique=True))
def test_expanding_a_range_list_gives_each_number_once(numbers: list[int]) -> None:
    spec = ",".join(str(n) for n in numbers)
    assert expand(f"node[{spec}]") == tuple(f"node{n}" for n in numbers)


@given(st.text(alphabet="ab1-, \t", max_size=30))
def test_a_list_without_brackets_expands_as_the_general_walk_does(hostlist: str) -> None:
    """Bracket-free lists take a shortcut; one bracketed name ("#[1]", which no other name can equal) sends the same
    list the general way, and the two agree on every name before it."""
    assert expand(hostlist) == expand(f"{hostlist},#[1]")[:-1]
