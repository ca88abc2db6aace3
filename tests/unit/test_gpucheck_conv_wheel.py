"""causal-conv1d for the GPU check (gpucheck.conv_wheel): the pinned sdist edited into a forward-only sm_90 build
(on the real sdist, which is small; the CUDA code itself is never compiled here), edits that fail loudly on a source
they do not know, the cache keyed by the pins, collect carrying the wheel among the kernel wheels, and the in-process
run seeing causal_conv1d from the carried kernels and hiding it when asked."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest

from gpucheck import carry, collect, conv_wheel


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    return conv_wheel.download_sdist(tmp_path_factory.mktemp("sdist"))


@pytest.fixture(scope="module")
def edited(sdist, tmp_path_factory):
    return conv_wheel.prepare_sources(sdist, tmp_path_factory.mktemp("src") / "src")


@pytest.mark.network
def test_the_sdist_is_the_pinned_one(sdist):
    assert hashlib.sha256(sdist.read_bytes()).hexdigest() == conv_wheel.SDIST_SHA256
    assert sdist.name == f"causal_conv1d-{conv_wheel.VERSION}.tar.gz"


@pytest.mark.network
def test_the_edited_build_is_sm_90_only(edited):
    setup = (edited / "setup.py").read_text()
    assert re.findall(r"arch=compute_\d+,code=sm_\d+", setup) == ["arch=compute_90,code=sm_90"]
    assert setup.count('cc_flag.append("-gencode")') == 1
    assert '"-lineinfo"' not in setup


@pytest.mark.network
def test_the_edited_build_has_no_backward_source_and_its_entry_point_raises(edited):
    setup = (edited / "setup.py").read_text()
    sources = re.search(r"sources=\[(.*?)\]", setup, re.S).group(1)
    assert re.findall(r'"(csrc/[^"]+)"', sources) == ["csrc/causal_conv1d.cpp", "csrc/causal_conv1d_fwd.cu",
                                                      "csrc/causal_conv1d_update.cu"]
    assert not list(edited.rglob("*bwd*.cu"))
    binding = (edited / "csrc" / "causal_conv1d.cpp").read_text()
    assert "causal_conv1d_bwd_cuda<" not in binding and "causal_conv1d_channellast_bwd_cuda<" not in binding
    assert f'TORCH_CHECK(false, "{conv_wheel.FORWARD_ONLY_MESSAGE}");' in binding
    # the forward and the update are untouched
    assert "causal_conv1d_fwd_cuda<input_t, weight_t>(params, stream);" in binding
    assert 'm.def("causal_conv1d_update"' in binding


@pytest.mark.network
def test_editing_the_edited_tree_again_fails_by_name(edited):
    with pytest.raises(conv_wheel.EditMismatch, match="setup.py: the text to replace is there 0 times"):
        conv_wheel.forward_only(edited)


def _tree(tmp_path, setup: str, binding: str):
    root = tmp_path / "tree"
    (root / "csrc").mkdir(parents=True)
    (root / "setup.py").write_text(setup)
    (root / "csrc" / "causal_conv1d.cpp").write_text(binding)
    (root / conv_wheel.BACKWARD_SOURCE).write_text("// backward\n")
    return root


def _upstream_setup() -> str:
    return (conv_wheel.ALL_ARCHS + "        sources=[\n"
            + f'                "{conv_wheel.BACKWARD_SOURCE}",\n' + '                    "-lineinfo",\n')


def test_a_source_without_a_text_to_replace_fails_loudly_and_names_the_file(tmp_path):
    root = _tree(tmp_path, _upstream_setup(), "// a binding whose backward dispatch was rewritten upstream\n")
    with pytest.raises(conv_wheel.EditMismatch, match="csrc/causal_conv1d.cpp: the text to replace is there 0 times"):
        conv_wheel.forward_only(root)


def test_a_text_found_twice_fails_loudly(tmp_path):
    root = _tree(tmp_path, _upstream_setup() + conv_wheel.ALL_ARCHS, conv_wheel.BACKWARD_DISPATCH)
    with pytest.raises(conv_wheel.EditMismatch, match="there 2 times, not once"):
        conv_wheel.forward_only(root)


def test_a_source_the_edits_know_is_edited_and_loses_its_backward_file(tmp_path):
    root = _tree(tmp_path, _upstream_setup(), conv_wheel.BACKWARD_DISPATCH)
    conv_wheel.forward_only(root)
    assert not (root / conv_wheel.BACKWARD_SOURCE).exists()
    assert "TORCH_CHECK(false" in (root / "csrc" / "causal_conv1d.cpp").read_text()


def test_an_sdist_whose_sha256_is_not_the_pin_is_refused_and_not_kept(tmp_path):
    impostor = tmp_path / "causal_conv1d-1.7.0.tar.gz"
    with tarfile.open(impostor, "w:gz"):
        pass
    scratch = tmp_path / "scratch"
    with pytest.raises(RuntimeError, match="sha256 .* pinned"):
        conv_wheel.download_sdist(scratch, url=impostor.as_uri())
    assert not list(scratch.iterdir())


def _fake_wheel(folder, name="causal_conv1d-1.7.0+fwd.sm90-cp312-cp312-linux_x86_64.whl"):
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / name
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("causal_conv1d/__init__.py", '__version__ = "1.7.0"\n')
    return wheel


def test_a_wheel_built_under_the_same_pins_is_reused_and_one_that_changed_is_not(tmp_path):
    folder = tmp_path / f"built-{conv_wheel.pins_key()}"
    wheel = _fake_wheel(folder)
    info = conv_wheel.describe(wheel)
    (folder / "causal-conv1d.json").write_text(json.dumps(info))
    assert conv_wheel.cached(tmp_path) == (wheel, info)
    wheel.write_bytes(b"not the wheel described")
    assert conv_wheel.cached(tmp_path) is None
    assert conv_wheel.cached(tmp_path / "elsewhere") is None


def test_the_pins_key_changes_with_any_edit(monkeypatch):
    before = conv_wheel.pins_key()
    monkeypatch.setattr(conv_wheel, "EDITS", conv_wheel.EDITS[:-1])
    assert conv_wheel.pins_key() != before


def test_the_description_says_what_the_wheel_is(tmp_path):
    wheel = _fake_wheel(tmp_path)
    info = conv_wheel.describe(wheel)
    assert info["version"] == "1.7.0" and info["arch"] == "sm_90" and info["build"] == "forward-only"
    assert info["size"] == wheel.stat().st_size
    assert info["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    written = conv_wheel.write(tmp_path / "dest", wheel, info)
    assert written.read_bytes() == wheel.read_bytes()
    assert json.loads((tmp_path / "dest" / "causal-conv1d.json").read_text()) == info


def test_collect_carries_the_wheel_among_the_kernel_wheels(tmp_path):
    wheel = _fake_wheel(tmp_path / "cache")
    info = {"wheel": wheel.name, "build": "forward-only"}
    dest = tmp_path / "carry"
    assert collect.carry_conv_wheel(dest, "3.12", ensure=lambda: (wheel, info)) == info
    assert [path.name for path in (dest / carry.KERNEL_WHEELS).iterdir()] == [wheel.name]


def test_collect_carries_no_wheel_for_another_python(tmp_path, capsys):
    def never():
        raise AssertionError("built for a Python the wheel is not for")

    assert collect.carry_conv_wheel(tmp_path, "3.11", ensure=never) is None
    assert not (tmp_path / carry.KERNEL_WHEELS).exists()
    assert "not carried" in capsys.readouterr().err


_FACTS = ("import json, sys; sys.path.insert(0, sys.argv[1]); from gpucheck import inprocess; "
          "sys.argv[2:] and inprocess.block_kernels(); print(json.dumps(inprocess.kernel_facts()))")


@pytest.mark.parametrize("blocked", [False, True])
def test_the_inprocess_run_sees_the_carried_causal_conv1d_and_hides_it_with_fla_when_asked(tmp_path, blocked):
    """As gpucheck.inprocess runs with --kernels DIR (the install step's folder of kernel wheels), with and without
    --block-kernels."""
    for name, version in (("causal_conv1d", "1.7.0"), ("fla", "0.5.2")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f'__version__ = "{version}"\n')
    done = subprocess.run([sys.executable, "-c", _FACTS, str(tmp_path), *(["block"] if blocked else [])],
                          capture_output=True, text=True, check=True, cwd=carry.REPO_ROOT)
    facts = json.loads(done.stdout)
    if blocked:
        assert not facts["causal_conv1d"]["importable"] and not facts["fla"]["importable"]
    else:
        assert facts["causal_conv1d"] == {"importable": True, "version": "1.7.0", "error": None}
        assert facts["fla"]["version"] == "0.5.2"
