"""Multi-GPU parsing and tensor-parallel grouping against the DERIVED fixtures of
tests/unit/fixtures/derived-multi-gpu (made by its derive.py from the real one-GPU outputs and
the documented `nvidia-smi topo -m` format; no multi-GPU host has been captured yet)."""
import pathlib
import subprocess
import sys

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils import _nvidia

DERIVED = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "derived-multi-gpu"
REAL = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "real-gpu-host"


def derived(name):
    return (DERIVED / name).read_text()


def interconnect(name):
    return _nvidia.gpu_interconnect(_nvidia.parse_topo_matrix(derived(name)))


def test_the_fixtures_are_what_derive_py_writes(tmp_path):
    subprocess.run([sys.executable, str(DERIVED / "derive.py"), str(tmp_path)], check=True)

    def files(root):
        return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*")
                if path.is_file() and path.suffix in (".txt", ".csv", ".xml")}

    assert files(tmp_path) == files(DERIVED)


def test_xml_of_eight_gpus_in_pci_order_with_their_uuids():
    gpus = _nvidia.gpus_from_smi_xml(derived("h200-8gpu-nvlink/nvidia-smi-q.xml"))
    assert [gpu["pci_bus_id"] for gpu in gpus] == [
        "00000000:%s:00.0" % bus for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]
    assert [gpu["minor_number"] for gpu in gpus] == list(range(8))
    assert len({gpu["uuid"] for gpu in gpus}) == 8
    assert gpus[0]["uuid"] == "GPU-4ed21e5a-8d48-380e-78f2-719f33a452dc"
    assert {gpu["name"] for gpu in gpus} == {"NVIDIA H200"}


def test_xml_parser_reads_the_real_one_gpu_capture():
    assert _nvidia.gpus_from_smi_xml((REAL / "nvidia-smi-q.xml").read_text()) == [{
        "index": 0, "name": "NVIDIA H200", "uuid": "GPU-4ed21e5a-8d48-380e-78f2-719f33a452dc",
        "pci_bus_id": "00000000:00:06.0", "minor_number": 0}]


def test_query_csv_and_xml_agree_on_order_and_uuids():
    rows = _nvidia.gpus_from_query(_nvidia.parse_query_csv(derived("h200-8gpu-nvlink/nvidia-smi-query.csv")))
    xml = _nvidia.gpus_from_smi_xml(derived("h200-8gpu-nvlink/nvidia-smi-q.xml"))
    assert [(g["index"], g["uuid"], g["pci_bus_id"]) for g in rows] == [
        (g["index"], g["uuid"], g["pci_bus_id"]) for g in xml]


def test_topo_matrix_of_a_pcie_server():
    topology = _nvidia.parse_topo_matrix(derived("rtx-pro-6000-8gpu-pcie/nvidia-smi-topo-m.txt"))
    assert topology["devices"] == ["GPU%d" % i for i in range(8)]
    assert topology["links"]["GPU0"]["GPU1"] == "PIX"
    assert topology["links"]["GPU1"]["GPU2"] == "NODE"
    assert topology["links"]["GPU3"]["GPU4"] == "SYS"
    assert topology["affinity"]["GPU5"] == {"CPU Affinity": "32-63,96-127", "NUMA Affinity": "1", "GPU NUMA ID": "N/A"}


def test_interconnect_names_every_pair_once():
    pairs = interconnect("h200-8gpu-nvlink/nvidia-smi-topo-m.txt")
    assert len(pairs) == 28
    assert pairs[0] == {"gpus": [0, 1], "link": "NV18", "type": "nvlink", "nvlinks": 18}
    assert {pair["link"] for pair in pairs} == {"NV18"}
    pcie = interconnect("rtx-pro-6000-8gpu-pcie/nvidia-smi-topo-m.txt")
    assert {pair["type"] for pair in pcie} == {"pcie"}
    assert [pair["gpus"] for pair in pcie if pair["link"] == "PIX"] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_a_matrix_with_nics_and_colour_codes():
    text = ("\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
            "GPU0\t X \tNV4\tPHB\t0-7\t0\t\tN/A\nGPU1\tNV4\t X \tPHB\t0-7\t0\t\tN/A\nNIC0\tPHB\tPHB\t X \t\t\t\t\n")
    topology = _nvidia.parse_topo_matrix(text)
    assert topology["devices"] == ["GPU0", "GPU1", "NIC0"]
    assert _nvidia.gpu_interconnect(topology) == [{"gpus": [0, 1], "link": "NV4", "type": "nvlink", "nvlinks": 4}]


def test_link_ranks_put_nvlink_first_then_the_shorter_pcie_path():
    ordered = ["NV18", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS", "N/A"]
    assert sorted(ordered, key=_nvidia.link_rank, reverse=True) == ordered


@pytest.mark.parametrize("size, groups", [
    (1, [[i] for i in range(8)]),
    (2, [[0, 1], [2, 3], [4, 5], [6, 7]]),
    (4, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (8, [list(range(8))]),
])
def test_pcie_groups_stay_behind_a_switch_then_within_a_socket(size, groups):
    pairs = interconnect("rtx-pro-6000-8gpu-pcie/nvidia-smi-topo-m.txt")
    assert _nvidia.tensor_parallel_groups(range(8), size, pairs) == groups


def test_nvlink_mesh_pairs_the_double_links_over_pci_neighbours():
    # GPU0-GPU3 and GPU1-GPU2 share two NVLinks; the PCI neighbours only one.
    pairs = interconnect("nvlink-mesh-4gpu/nvidia-smi-topo-m.txt")
    assert _nvidia.tensor_parallel_groups([0, 1, 2, 3], 2, pairs) == [[0, 3], [1, 2]]


def test_equal_links_keep_pci_order():
    pairs = interconnect("h200-8gpu-nvlink/nvidia-smi-topo-m.txt")
    assert _nvidia.tensor_parallel_groups(range(8), 2, pairs) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_a_subset_of_gpus_and_unknown_links():
    pairs = interconnect("rtx-pro-6000-8gpu-pcie/nvidia-smi-topo-m.txt")
    assert _nvidia.tensor_parallel_groups([1, 2, 3, 4], 2, pairs) == [[1, 4], [2, 3]]
    assert _nvidia.tensor_parallel_groups([0, 1], 2, []) == [[0, 1]]


@pytest.mark.parametrize("gpus, size", [([0, 1, 2], 2), ([0, 1], 0), ([], 1)])
def test_a_split_that_does_not_fit_is_refused(gpus, size):
    with pytest.raises(ValueError, match="cannot split"):
        _nvidia.tensor_parallel_groups(gpus, size, [])
