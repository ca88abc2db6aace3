"""Which CUDA libraries the stub and the in-process run loaded, read from /proc: the report names every file and any
library the two sides took from different places."""
from gpucheck import libraries


def _proc(tmp_path, pid: int, parent: int, mapped: list[str]):
    folder = tmp_path / str(pid)
    folder.mkdir()
    (folder / "stat").write_text(f"{pid} (some (odd) name) S {parent} 1 1 0\n")
    (folder / "maps").write_text("".join(
        f"7f00-7f01 r-xp 00000000 08:01 {index} {path}\n" for index, path in enumerate(mapped)) +
        "7f02-7f03 rw-p 00000000 00:00 0 \n7f04-7f05 r--p 00000000 00:00 0 [vdso]\n")


def test_the_watched_libraries_a_process_mapped_are_named_with_their_files(tmp_path):
    _proc(tmp_path, 10, 1, ["/sys-lib/libnccl.so.2.28.3", "/wheel/nvidia/cudnn/lib/libcudnn.so.9",
                            "/wheel/torch/lib/libtorch_cuda.so", "/usr/lib/libz.so.1", "/wheel/libcudnn_ops.so.9"])
    assert libraries.loaded(10, maps_root=tmp_path) == {
        "libcudnn": "/wheel/nvidia/cudnn/lib/libcudnn.so.9", "libcudnn_ops": "/wheel/libcudnn_ops.so.9",
        "libnccl": "/sys-lib/libnccl.so.2.28.3", "libtorch_cuda": "/wheel/torch/lib/libtorch_cuda.so"}
    assert libraries.loaded(11, maps_root=tmp_path) == {}  # gone, or not readable


def test_every_descendant_of_the_server_is_found_and_differences_are_by_file(tmp_path):
    _proc(tmp_path, 20, 1, [])
    _proc(tmp_path, 21, 20, [])
    _proc(tmp_path, 22, 21, [])
    _proc(tmp_path, 23, 1, [])
    assert libraries.children(20, proc=tmp_path) == [21, 22]
    stub = {"libnccl": "/sys-lib/libnccl.so.2.28.3", "libcudart": "/wheel/libcudart.so.13"}
    inprocess = {"libnccl": "/wheel/libnccl.so.2", "libcudart": "/wheel/libcudart.so.13", "libcudnn": "/x"}
    assert libraries.differences(stub, inprocess) == {"libnccl": ["/sys-lib/libnccl.so.2.28.3", "/wheel/libnccl.so.2"]}
