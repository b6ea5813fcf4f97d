"""The kernel manager of ``dlexplore explore``: Jupyter's, with culling that spares the kernel Voila
has just handed to a page.

With a pool of pre-started kernels (Voila's ``preheat_kernel``), a pooled kernel has run the
notebook and then sits idle, possibly for longer than the cull time (an empty classroom). Voila's
culler skips kernels while they are in the pool; when a page asks, the kernel leaves the pool with
an old last activity and no connection until the page's websocket opens a second or two later, and
a cull check in that window stopped it: the page never drew. Here leaving the pool counts as
activity, so the kernel gets a full ``cull_idle_timeout`` to be connected (and is culled after it
if the page never connects).

Named by ``--VoilaConfiguration.multi_kernel_manager_class`` (see :func:`dlexplore.serve.explore_command`).
"""

from __future__ import annotations

from jupyter_server._tz import utcnow
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

__all__ = ["ClassroomKernelManager"]


class ClassroomKernelManager(AsyncMappingKernelManager):
    """:class:`AsyncMappingKernelManager` whose kernels count leaving Voila's pool as activity."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._dlx_pooled: set[str] = set()

    def pooled_kernel_ids(self) -> set[str]:
        """The kernels now waiting in Voila's pools (started; none without a pool)."""
        ids = set()
        for pool in getattr(self, "_pools", {}).values():
            for item in pool:
                if item.done() and not item.cancelled() and item.exception() is None:
                    kernel_id = item.result().get("kernel_id")
                    if kernel_id:
                        ids.add(kernel_id)
        return ids

    def note_pool(self) -> set[str]:
        """Mark the kernels that left the pool since the last call as active now; return them."""
        pooled = self.pooled_kernel_ids()
        left = {k for k in self._dlx_pooled - pooled if k in self._kernels}
        for kernel_id in left:
            self._kernels[kernel_id].last_activity = utcnow()
        self._dlx_pooled = pooled
        return left

    async def cull_kernels(self):
        self.note_pool()  # every check, so that a kernel is seen in the pool before it leaves
        await super().cull_kernels()

    async def cull_kernel_if_idle(self, kernel_id):
        self.note_pool()  # a page may have taken one while an earlier kernel was being stopped
        await super().cull_kernel_if_idle(kernel_id)
