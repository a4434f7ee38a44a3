# STAND-IN for roles/python_env/files/smoke.py: a test double, not the SGLang smoke test.
# The test locks (tests/standin/locks/) hold no SGLang, torch or FlashInfer, so this one
# imports every top-level module each installed distribution declares (a module that does
# not import fails the verification, as an SGLang import would) and reports every
# distribution's version in smoke.py's format, which the role compares with the lock.
# The role sends it as `python -c`; it must stay stdlib-only.
import importlib
import importlib.metadata as metadata
import json
import platform
import sys

report = {
    "python": platform.python_version(),
    "modules": {},
    "torch_cuda": None,
    "distributions": {},
    "standin": True,
}
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    report["distributions"][name.lower().replace("_", "-").replace(".", "-")] = dist.version
    top = (dist.read_text("top_level.txt") or "").split()
    for module in top or [name.replace("-", "_")]:
        if module.startswith("_") or module in sys.builtin_module_names:
            continue
        loaded = importlib.import_module(module)
        report["modules"][module] = str(getattr(loaded, "__version__", ""))
print("GPUHOST_SMOKE " + json.dumps(report, sort_keys=True))
