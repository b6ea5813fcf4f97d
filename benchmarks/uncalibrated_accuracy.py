"""Uncalibrated model against every shipped throughput table: per-point error and MAPE.

The model runs with its documented defaults (no fitting), each point's setup taken from the
dataset's coordinates: network, GPUs per node, precision, algorithm ("none"/"unknown" -> ring).
Single-node points use the node's link (NVLink1 on a P100 DGX-1, NVLink2 on V100 DGX-1/DGX-2) as
the intra-node link. Parameter-server rows use one server: the sources do not say how many ran.

    python benchmarks/uncalibrated_accuracy.py
"""

from __future__ import annotations

import numpy as np

import dlexplore as dlx
from dlexplore.measured import to_frame

INTRA_LINKS = {"NVLink1": "NVLink1", "NVLink2": "NVLink2"}


def main() -> None:
    for name in dlx.measured.available():
        ds = dlx.measured.load(name)
        if "throughput" not in ds:
            continue
        frame = to_frame(ds)
        errors = []
        print(f"\n{name}  ({ds.attrs['source'][:90]})")
        for _, row in frame.iterrows():
            algorithm = row.get("algorithm", "unknown")
            if algorithm in ("none", "unknown"):
                algorithm = "ring"
            per_node = int(row["gpus_per_node"]) if "gpus_per_node" in frame else 1
            intra = INTRA_LINKS.get(row.network, "PCIe3")
            network = "100GbE" if row.network in INTRA_LINKS else row.network
            predicted = dlx.predict(
                row.workload, row.gpu, network, gpus=int(row.gpus), batch_size=int(row.batch_size),
                precision=row.precision, algorithm=algorithm, gpus_per_node=per_node,
                intra_link=intra,
            ).throughput.item()
            error = (predicted - row.throughput) / row.throughput
            errors.append(abs(error))
            print(f"  {row.workload:12s} {row.gpu:9s} {row.precision:4s} gpus={int(row.gpus):3d} "
                  f"{str(row.get('setup', ''))[:34]:34s} measured {row.throughput:8.1f}  "
                  f"predicted {predicted:8.1f}  {100 * error:+6.1f}%")
        print(f"  MAPE {100 * np.mean(errors):.1f}% over {len(errors)} points")


if __name__ == "__main__":
    main()
