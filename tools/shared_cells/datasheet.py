#@title The datasheet table: published peaks of a few NVIDIA GPUs, by model, memory and form factor
import re

# NVIDIA's datasheets, one row per model, memory size and form factor where the figures differ: an
# SXM module (for NVLink servers) runs at a higher clock than the PCIe card, and the A100's 80 GB of
# memory is faster than its 40 GB. Memory None: every size; "any": every form factor; "SXM": SXM4
# and SXM5 too. The H100 NVL and the H200 get a row once their figures are checked on NVIDIA's
# pages; until then the cell says they are not in the table rather than show another card's peak.
DATASHEETS = [  # (model, memory GB, form factor, memory GB/s, float32 TFLOP/s)
    ("T4", None, "any", 320, 8.1),
    ("P100", 16, "PCIE", 732, 9.3),
    ("P100", 12, "PCIE", 549, 9.3),
    ("P100", 16, "SXM2", 732, 10.6),
    ("V100", None, "PCIE", 900, 14.0),
    ("V100", None, "SXM2", 900, 15.7),
    ("A100", 40, "any", 1555, 19.5),
    ("A100", 80, "PCIE", 1935, 19.5),
    ("A100", 80, "SXM", 2039, 19.5),
    ("L4", None, "any", 300, 30.3),
    ("H100", 80, "SXM", 3350, 67.0),  # its name says no form factor: 'NVIDIA H100 80GB HBM3'
    ("H100", None, "PCIE", 2000, 51.0),  # 'NVIDIA H100 PCIe'
]
DATASHEET_PAGES = {
    "T4": "https://www.nvidia.com/en-us/data-center/tesla-t4/",
    "P100": "https://www.nvidia.com/en-us/data-center/tesla-p100/",
    "V100": "https://www.nvidia.com/en-us/data-center/v100/",
    "A100": "https://www.nvidia.com/en-us/data-center/a100/",
    "L4": "https://www.nvidia.com/en-us/data-center/l4/",
    "H100": "https://www.nvidia.com/en-us/data-center/h100/",
}
# Models whose SXM module's device name says no form factor ('NVIDIA H100 80GB HBM3'), while their
# PCIe and NVL cards say theirs ('NVIDIA H100 PCIe', 'NVIDIA H100 NVL', 'NVIDIA H200 NVL').
SXM_UNLESS_NAMED = ("H100", "H200")


def form_factor(gpu_name):
    """'PCIE', 'SXM2', 'NVL', ... as the device name says ('Tesla V100-SXM2-16GB'); 'SXM' for an
    H100 or H200 whose name says none ('NVIDIA H100 80GB HBM3'); else None."""
    found = re.search(r"\b(PCIE|SXM\d*|NVL)\b", gpu_name, flags=re.IGNORECASE)
    if found:
        return found.group(1).upper()
    named = any(re.search(rf"\b{model}\b", gpu_name) for model in SXM_UNLESS_NAMED)
    return "SXM" if named else None


def memory_gb(gpu_name):
    """The memory size in GB the device name gives ('NVIDIA A100 80GB PCIe': 80), else None."""
    found = re.search(r"(\d+)\s*GB\b", gpu_name, flags=re.IGNORECASE)
    return int(found.group(1)) if found else None


def datasheet(gpu_name):
    """(memory GB/s, float32 TFLOP/s, datasheet page) of the row of DATASHEETS for the device name's
    model, memory and form factor, or None for a GPU the table does not know."""
    form, memory = form_factor(gpu_name) or "", memory_gb(gpu_name)
    for model, gb, factor, gb_per_s, tflop_per_s in DATASHEETS:
        if (re.search(rf"\b{model}\b", gpu_name) and gb in (None, memory)
                and (factor == "any" or form.startswith(factor))):
            return gb_per_s, tflop_per_s, DATASHEET_PAGES[model]
    return None


def published_peak(gpu_name):
    """(TFLOP/s, datasheet page) of the published float32 peak of a known GPU, or None."""
    found = datasheet(gpu_name)
    return None if found is None else found[1:]


def datasheet_table(gpu_name, measured_gflops):
    """Measured against published float32 TFLOP/s, rounded; None for a GPU not in the table."""
    peak = published_peak(gpu_name)
    if peak is None:
        return None
    measured = measured_gflops / 1000
    return pd.DataFrame({"measured_TFLOP_per_s": [round(measured, 1)],
                         "published_TFLOP_per_s": [peak[0]],
                         "share_of_peak_pct": [round(100 * measured / peak[0])]},
                        index=pd.Index([gpu_name], name="GPU"))
