"""`edgekit build`: a bundle's model made ready for one target and recorded as an engine
(``stage``: the build; ``ort``/``trt``: per-runtime builders; ``install``: files into the bundle;
``demo``: the demo's build stage; ``render``: the console tables)."""

from edgekit.builder.demo import demo_build_stage
from edgekit.builder.ort import fix_dynamic_shapes
from edgekit.builder.stage import (
    BUILD_SCHEMA,
    build_bundle,
    builds_on_device,
    select_engine,
)
from edgekit.host import HostFacts, module_available
from edgekit.runtimes.engines import (
    ENGINES_DIR,
    EngineChoice,
    device_problems,
    engine_key,
    engine_problems,
)

__all__ = [
    "BUILD_SCHEMA",
    "ENGINES_DIR",
    "EngineChoice",
    "HostFacts",
    "build_bundle",
    "builds_on_device",
    "demo_build_stage",
    "device_problems",
    "engine_key",
    "engine_problems",
    "fix_dynamic_shapes",
    "module_available",
    "select_engine",
]
