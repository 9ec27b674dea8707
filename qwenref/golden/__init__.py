"""The golden model: every stage in float32 numpy. It is the definition the kernels match."""
from .norm import *  # noqa: F401,F403
from .rope import *  # noqa: F401,F403
from .wht import *  # noqa: F401,F403
from .kvcache import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .indexer import *  # noqa: F401,F403
from .layer import *  # noqa: F401,F403
