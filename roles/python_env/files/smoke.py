# Import smoke test of the SGLang stack, run by the python_env role inside the venv.
# Needs no GPU: it imports the packages and reports what is installed. The role reads the
# last line, tagged GPUHOST_SMOKE, as JSON (imports may print their own lines before it).
import contextlib
import importlib
import importlib.metadata as metadata
import json
import platform
import sys

modules = {name: importlib.import_module(name) for name in ("torch", "flashinfer", "sglang")}
report = {
    "python": platform.python_version(),
    "modules": {name: str(getattr(mod, "__version__", "")) for name, mod in modules.items()},
    # The CUDA line torch was built for: the lane's promise (12.8 or 13.0).
    "torch_cuda": modules["torch"].version.cuda,
    "distributions": {},
}
# The distributions the role names after the script (the lock's key packages, as the lock
# names them: gpuhost_python_env.lock_info); one the venv lacks is left out, and the role's
# comparison with the lock then says "installed nothing".
for name in sys.argv[1:]:
    with contextlib.suppress(metadata.PackageNotFoundError):
        report["distributions"][name] = metadata.version(name)
print("GPUHOST_SMOKE " + json.dumps(report, sort_keys=True))
