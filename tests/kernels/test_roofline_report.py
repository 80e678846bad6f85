"""The report's use of the roofline model without compiling anything: a prefill row's
reuse from its name and its kernel's constants, the Markdown table, and the README's
copy of that table holding the same columns (its numbers are regenerated, not tested)."""

from pathlib import Path

from cuda_kernels import report
from cuda_kernels.tools import report_format, roofline

README = Path(__file__).resolve().parents[2] / "cuda_kernels" / "README.md"


def kernel_with(**constants):
    """A function closing over `constants`, as the kernel factories' kernels do."""
    QT, T, G = constants.get("QT"), constants.get("T"), constants.get("G")  # noqa: N806

    def kernel():
        return QT, T, G

    return kernel


def test_a_prefill_row_takes_its_reuse_from_its_name_and_its_kernels_constants():
    case = report.prefill_case(
        "paged_prefill_tc[float16,G=4,D=128]", kernel_with(QT=16, T=64, G=4), ctas_per_sm=2
    )
    assert (case["q_tile"], case["kv_tile"], case["reuse"]) == (16, 64, 49.0)
    assert case["l2_footprint_bytes"] == 6 * 2048 * 128 * 2 * 2
    # the CUDA-core prefill at G=8: 2 query tokens per CTA, 32-token tiles, 512 query tiles
    core = report.prefill_case(
        "paged_prefill[float16,G=8,D=128]", kernel_with(QT=2, T=32, G=8), ctas_per_sm=4
    )
    reads = sum(32 + -(-2 * (i + 1) // 32) for i in range(512))
    assert core["reuse"] == round(reads / 64, 2)


def test_only_prefill_rows_get_a_reuse_and_one_without_constants_gets_no_bound():
    assert report.prefill_case("paged_decode[float16,G=4,D=128]", kernel_with(), 3) == {}

    def bare():
        return None

    case = report.prefill_case("paged_prefill_tc[float16,G=4,D=128]", bare, 2)
    assert case["reuse"] is None and "QT, T" in case["reuse_case"]
    unnamed = report.prefill_case("paged_prefill_tc[float16]", kernel_with(QT=16, T=64), 2)
    assert unnamed["reuse"] is None
    row = {"loop_sass": 526, "loop_kv_bytes": 8192, "tensor_flops": 540672, "loop_flops": 1}
    got = roofline.model(row, case["reuse"], expects_flops=True)
    assert got["bound"] is None and got["bound_note"] == roofline.NO_REUSE


ROWS = [
    {
        "kernel": "paged_decode_tc[float16,G=4,D=128]",
        "arch": "sm_90",
        "registers": 139,
        "spill_bytes": 0,
        "warps_per_sm": 12,
        "loop_sass": 402,
        "sass_per_kv_byte": 0.0491,
        "hmma": 32,
        "loop_sass_per_hmma": 12.56,
        "ldsm": 8,
        "ldgsts": 16,
        "reuse": 1.0,
        "flops_per_hbm_byte": 16.16,
        "bound": "memory",
        "expected_pct_of_peak": 100.0,
        "expected_pct_of_tensor_peak": 6.96,
    },
    {"kernel": "write_kv[f16]", "arch": "sm_90"},
    {
        "kernel": "paged_prefill[float32,G=4,D=80]",
        "arch": "sm_90",
        "registers": 64,
        "spill_bytes": 0,
    },
]


def test_the_markdown_table_shows_decode_and_prefill_rows_and_dashes_for_missing_figures():
    text = report_format.markdown(ROWS)
    lines = text.splitlines()
    assert "As of" not in text  # no hand-stamped commit: the test of the README keeps it fresh
    assert report_format.table_heads(text) == [report_format.MARKDOWN_HEADS]
    body = [line for line in lines if line.startswith("| `")]
    assert len(body) == 2 and "write_kv" not in text
    assert body[0] == (
        "| `paged_decode_tc[float16,G=4,D=128]` | sm_90 | 139 | 0 | 12 | 402 | "
        "0.049 | 32 | 12.56 | 8 | 16 | 1.0 | 16 | memory | 100.0 | 7.0 |"
    )
    assert body[1].endswith("| 64 | 0 | - | - | - | - | - | - | - | - | - | - | - | - |")


def test_the_readmes_kernel_table_has_the_columns_the_markdown_command_prints():
    section = README.read_text().split("## Kernels without a GPU", 1)[1].split("\n## ", 1)[0]
    assert report_format.MARKDOWN_HEADS in report_format.table_heads(section)
    assert report_format.BLOCKS["kernel"][0] in section  # the marker names `report --readme`
