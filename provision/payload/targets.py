"""GPU build targets: the one parser of names like sm_80, sm_90a, sm_100, sm_120f and compute_90.

sm_XY is SASS, native code for compute capability X.Y; compute_XY is PTX for X.Y, which the driver
JIT-compiles for that or any newer GPU. The minor is the last digit: sm_89 is 8.9, sm_100 is 10.0,
sm_120 is 12.0. A suffix `a` marks architecture-specific features (the code runs on X.Y only, as
sm_90a's wgmma on Hopper); `f` family-specific ones (it runs on X.Z for Z >= Y, CUDA 12.9+).
"""

import re
from typing import NamedTuple, Optional, Tuple

_NAME = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)")


class CodeTarget(NamedTuple):
    kind: str  # "sm" (SASS) or "compute" (PTX)
    major: int
    minor: int
    suffix: str = ""  # "", "a" (architecture-specific) or "f" (family-specific)

    @property
    def capability(self) -> Tuple[int, int]:
        return (self.major, self.minor)

    @property
    def name(self) -> str:
        return f"{self.kind}_{self.major}{self.minor}{self.suffix}"

    def _runs_on(self, cc: Tuple[int, int]) -> bool:
        if self.suffix == "a":
            return self.capability == cc
        if self.kind == "sm" or self.suffix == "f":
            return self.major == cc[0] and self.minor <= cc[1]
        return self.capability <= cc

    def native_on(self, cc: Tuple[int, int]) -> bool:
        """SASS that a GPU of compute capability `cc` runs as it is."""
        return self.kind == "sm" and self._runs_on(cc)

    def jit_on(self, cc: Tuple[int, int]) -> bool:
        """PTX that the driver can compile for a GPU of compute capability `cc`."""
        return self.kind == "compute" and self._runs_on(cc)


def parse(text: str) -> Optional[CodeTarget]:
    """'sm_89' -> CodeTarget('sm', 8, 9); 'sm_100' -> 10.0; 'sm_90a' -> 9.0, 'a'; else None."""
    m = _NAME.fullmatch(str(text).strip())
    if m is None:
        return None
    return CodeTarget(m.group(1), int(m.group(2)), int(m.group(3)), m.group(4))
