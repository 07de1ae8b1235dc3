"""Each module here gets one set of machines (network namespaces, :mod:`support.machines`), shared by its tests;
where they cannot be made (not root, no ``ip netns``) the module's tests skip, saying why."""
import pytest

from support import machines as harness


@pytest.fixture(scope="module")
def machines():
    why = harness.unavailable()
    if why:
        pytest.skip(why)
    with harness.Machines(2) as made:
        yield made
