"""STAND-IN `sglang` package: a gpuhost test double, not SGLang (sglang_pkg/README.md).

The tests install it into the venv the server unit runs (python_env_venv_dir), so the unit's
real ExecStart, `python -m sglang.launch_server ...`, starts the stand-in HTTP server
(sglang/_standin.py) where a real host starts SGLang. Never published, never in a lock.
"""

# Not a release of SGLang: the "+standin" local label shows in /server_info's version, and the
# answer carries `standin: true` (gpuhost's reports say so from there).
__version__ = "0.0.0+standin"
