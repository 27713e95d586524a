"""The ``dts`` process: ``python -m bridge ...`` and the ``dts`` script both start here.

What Arrow reads only once, when pyarrow loads, is chosen here, before the command line
(``bridge.cli``) imports it; then the command runs.

Imports within bridge: bridge.arrow_pool, bridge.cli.
"""

from __future__ import annotations

import os

from bridge.arrow_pool import return_freed_arrow_memory


def main() -> None:
    return_freed_arrow_memory(os.environ)
    from bridge.cli import cli  # pyarrow loads here, with the pool chosen

    cli()


if __name__ == "__main__":
    main()
