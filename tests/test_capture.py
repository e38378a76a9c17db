"""python -m pyprof.capture, driven against a stand-in nsys that 'captures' the shipped LeNet export."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from pyprof.capture import default_name, nsys_command
from pyprof.errors import PyprofError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "lenet.sqlite")

FAKE_NSYS = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, shutil, sys
    if sys.argv[1:] == ["--version"]:
        print("NVIDIA Nsight Systems version " + os.environ["FAKE_NSYS_VERSION"])
        sys.exit(0)
    with open(f"nsys-{{sys.argv[1]}}-argv.json", "w") as f:
        json.dump(sys.argv[1:], f)
    out = sys.argv[sys.argv.index("--output") + 1]
    if sys.argv[1] == "export":  # `nsys export ... --output OUT REPORT`
        shutil.copy({LENET!r}, out)
    elif os.environ.get("FAKE_NSYS_EXPORT", "1") == "1":
        open(out + ".nsys-rep", "w").close()
    sys.exit(int(os.environ.get("FAKE_NSYS_STATUS", "0")) if sys.argv[1] == "profile" else 0)
    """)


def run_capture(tmp_path, *args, version="2025.3.1.0", env_extra=None, nsys=True):
    if nsys:
        fake = tmp_path / "nsys"
        fake.write_text(FAKE_NSYS)
        fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "NSYS"}
    env["PATH"] = f"{tmp_path}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    env["FAKE_NSYS_VERSION"] = version
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "pyprof.capture", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True)


def test_capture_runs_nsys_with_pyprof_flags_then_parses(tmp_path):
    done = run_capture(tmp_path, "-o", "net", "--duration=20", "--", "python", "train.py", "--lr", "0.1")
    assert done.returncode == 0, done.stderr
    argv = json.loads((tmp_path / "nsys-profile-argv.json").read_text())
    assert argv == ["profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                    "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "--force-overwrite=true",
                    "--cuda-graph-trace=node", "--duration=20", "--output", "net", "python", "train.py", "--lr", "0.1"]
    # The export is made apart: `nsys profile --export` leaves out the NVTX payloads (NCCL's sizes).
    assert json.loads((tmp_path / "nsys-export-argv.json").read_text()) == [
        "export", "--type", "sqlite", "--output", "net.sqlite", "--include-blobs=true", "--force-overwrite=true",
        "net.nsys-rep"]
    records = [json.loads(line) for line in (tmp_path / "net.dict").read_text().splitlines()]
    assert len(records) == 44
    assert records[0]["op"] == "conv2d" and records[0]["kShortName"] == "implicit_convolve_sgemm"
    assert done.stderr.splitlines()[-1] == "pyprof.capture: wrote net.dict; next: python -m pyprof.prof net.dict"


def test_user_options_replace_defaults_and_whole_run(tmp_path):
    done = run_capture(tmp_path, "-t", "cuda,nvtx,cublas", "--whole", "-q", "--", "python", "train.py")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    argv = json.loads((tmp_path / "nsys-profile-argv.json").read_text())
    assert argv == ["profile", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
                    "--cuda-graph-trace=node", "-t", "cuda,nvtx,cublas", "--capture-range=none", "--output", "train", "python", "train.py"]


def test_missing_nsys(tmp_path):
    done = run_capture(tmp_path, "--", "python", "train.py", nsys=False)
    assert done.returncode == 8
    assert done.stderr == ("pyprof.capture: error: pyprof.capture needs Nsight Systems' 'nsys': "
                           "put it on PATH or set NSYS=/path/to/nsys\n")


def test_too_old_nsys(tmp_path):
    done = run_capture(tmp_path, "--", "python", "train.py", version="2022.4.2.1")
    assert done.returncode == 8
    assert done.stderr.endswith("is Nsight Systems 2022.4.2; pyprof needs 2023.1 or newer "
                                "(older ones can lose the CUDA kernel table under recent drivers)\n")


def test_no_export_written(tmp_path):
    done = run_capture(tmp_path, "--", "python", "train.py", env_extra={"FAKE_NSYS_EXPORT": "0", "FAKE_NSYS_STATUS": "3"})
    assert done.returncode == 8
    assert done.stderr.splitlines()[-1] == "pyprof.capture: error: nsys exited with status 3 and wrote no train.sqlite"


def test_output_folder_that_cannot_be_written_stops_before_the_run(tmp_path):
    done = run_capture(tmp_path, "-o", "no/such/net", "--", "python", "train.py")
    assert (done.returncode, done.stderr) == (10, "pyprof.capture: error: no/such/net.nsys-rep: cannot write (No "
                                                  "such file or directory)\n")
    assert not (tmp_path / "nsys-profile-argv.json").exists()  # nsys never ran


def test_program_is_required(tmp_path):
    done = run_capture(tmp_path, "-o", "x")
    assert done.returncode == 2
    assert "put the program to profile after '--'" in done.stderr


def test_output_name_must_be_ours():
    with pytest.raises(PyprofError, match="give the output name with pyprof.capture's own -o NAME"):
        nsys_command("nsys", "x", ["-o", "y"], ["python", "t.py"])


def test_default_name():
    assert default_name(["python", "-u", "scripts/train.py", "--x"]) == "train"
    assert default_name(["./bench"]) == "bench"
