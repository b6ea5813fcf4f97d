"""NICs shared by the GPUs of a node (dlexplore.model.topology)."""

import numpy as np

from dlexplore.model.topology import SHARING_ALGORITHMS, nic_share


def test_nic_share_by_hand():
    # 8 GPUs on one NIC see an eighth of it each in a hierarchical allreduce; a ring needs one
    assert float(nic_share("hierarchical", 8, 1)) == 1 / 8
    assert float(nic_share("ring", 8, 1)) == 1.0
    np.testing.assert_allclose(nic_share("tree", [4, 4, 4, 4], [0, 1, 2, 8]), [1.0, 0.25, 0.5, 1.0])
    assert set(SHARING_ALGORITHMS) == {"hierarchical", "tree", "recursive_doubling", "halving_doubling"}
