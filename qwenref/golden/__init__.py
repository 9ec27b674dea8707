"""The golden model: every stage in float32 numpy. It is the definition the kernels match.

Bad input (NaN or +-inf, a wrong type, shape or range) is refused with a TypeError or ValueError
naming the argument before anything is computed or stored: docs/bad-input.md."""

from .attention import *  # noqa: F401,F403
from .indexer import *  # noqa: F401,F403
from .kvcache import *  # noqa: F401,F403
from .layer import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .rope import *  # noqa: F401,F403
from .tq import *  # noqa: F401,F403
from .wht import *  # noqa: F401,F403
