"""Lanes: scripts/test.sh runs this suite as two pytest processes at once (VDL_TEST_LANE=1/2
and 2/2), each on its own files, because most tests wait (for elections, rebalances, JVMs
starting) rather than compute. Unset, one process runs every file.

Why two at once is safe: every test file starts its own clusters (module fixtures) or uses its
lane's session cluster, with its own temporary directories and random topic names; nothing is
shared between files but the machine. Port ranges are the one shared thing: each lane draws them
from its own slice of every range (`port_range`), so the two never probe the same ports.
"""

import os

# The files of lane 2, chosen so both lanes take about as long: lane 2 also runs the Java suite
# after its files (scripts/test.sh). Measured on a loaded 2-core machine: these 6 tests 205 s,
# then Java 500 s; lane 1's 84 tests 829 s (test_groups_failover.py, ~30 s, then moved here).
# test_consumer_protocol.py (~100 s: a Kafka 4.1 cluster's start and both targets) went to lane 2,
# which the Java suite's Kafka 4.1 target (~70 s) also lengthened: lanes then about 830 / 900 s.
# Every file not named here runs in lane 1, so a new file is never left out.
LANE_2_FILES = frozenset(
    {
        "test_consumer_protocol.py",
        "test_groups_failover.py",
        "test_membership.py",
        "test_nemesis_clock.py",
        "test_nemesis_netns.py",
        "test_verify.py",
    }
)


# The widest spread of ports above a base port that the suite's clusters use (+200..+202).
SPREAD = 300


def lane():
    """(k, n) from VDL_TEST_LANE="k/n" (k-th of n lanes, 1-based), or None when unset."""
    value = os.environ.get("VDL_TEST_LANE")
    if not value:
        return None
    k, _, n = value.partition("/")
    k, n = int(k), int(n)
    if n != 2 or not 1 <= k <= n:
        raise ValueError(f"VDL_TEST_LANE must be 1/2 or 2/2, not {value!r}")
    return k, n


def runs_here(filename):
    """Whether test file `filename` (a base name) runs in this process's lane."""
    current = lane()
    if current is None:
        return True
    return (2 if filename in LANE_2_FILES else 1) == current[0]


def port_range(lo, hi):
    """The part of the range [lo, hi) of base ports this lane draws from: the k-th of n equal
    slices with VDL_TEST_LANE=k/n, less its top SPREAD ports, so a base's own ports (base plus
    offsets up to +202 in this suite) stay inside its lane's slice; all of it without lanes."""
    current = lane()
    if current is None:
        return lo, hi
    k, n = current
    width = (hi - lo) // n
    return lo + (k - 1) * width, lo + k * width - SPREAD
