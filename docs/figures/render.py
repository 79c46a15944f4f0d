#!/usr/bin/env python3
"""Renders the datasheet's figures (docs/hardware-interface.md) as SVG, from the ABI crate.

The register and doorbell maps take their offsets from abi/src/regs.rs, abi/src/pci.rs and
abi/src/doorbell.rs, so a moved register moves in the figure too; the sequence, the QP
state machine and the frame layout are drawn from the descriptions below. Plain SVG
1.1 with no scripts and no fonts beyond the generic families, so any browser shows it.

    python3 docs/figures/render.py           writes docs/figures/*.svg
    python3 docs/figures/render.py --check   fails if a figure differs from what it would
                                             write (CI runs this: run the first, commit)
"""

import re
import sys
from html import escape
from pathlib import Path

HERE = Path(__file__).resolve().parent
ABI = HERE.parent.parent / "abi" / "src"

FONT = "font-family=\"monospace\" font-size=\"12\""
SANS = "font-family=\"sans-serif\" font-size=\"13\""


def consts(path, kind="u64"):
    """The `pub const NAME: KIND = <hex or decimal>;` items of an ABI source file."""
    out = {}
    for m in re.finditer(rf"pub const (\w+): {kind} = (0x[0-9A-Fa-f_]+|\d+);", path.read_text()):
        out[m.group(1)] = int(m.group(2).replace("_", ""), 0)
    return out


class Svg:
    """A small SVG canvas: boxes, text, lines and arrows, written deterministically."""

    def __init__(self, width, height, title):
        self.width, self.height, self.title, self.items = width, height, title, []

    def rect(self, x, y, w, h, fill="#ffffff", stroke="#333333", dash=False):
        d = ' stroke-dasharray="4 3"' if dash else ""
        self.items.append(
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" stroke="{stroke}"{d}/>'
        )

    def text(self, x, y, s, anchor="start", mono=True, weight="normal", color="#000000"):
        font = FONT if mono else SANS
        self.items.append(
            f'<text x="{x}" y="{y}" {font} text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{color}">{escape(s)}</text>'
        )

    def line(self, x1, y1, x2, y2, arrow=False, dash=False, color="#333333"):
        a = ' marker-end="url(#arrow)"' if arrow else ""
        d = ' stroke-dasharray="5 4"' if dash else ""
        self.items.append(
            f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}"{a}{d}/>'
        )

    def path(self, d, arrow=True):
        a = ' marker-end="url(#arrow)"' if arrow else ""
        self.items.append(f'<path d="{d}" fill="none" stroke="#333333"{a}/>')

    def render(self):
        head = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
            f'height="{self.height}" viewBox="0 0 {self.width} {self.height}">\n'
            f"<title>{escape(self.title)}</title>\n"
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
            'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            '<path d="M 0 0 L 10 5 L 0 10 z" fill="#333333"/></marker></defs>\n'
            f'<rect width="{self.width}" height="{self.height}" fill="#ffffff"/>\n'
        )
        return head + "\n".join(self.items) + "\n</svg>\n"


def bar0():
    """BAR0: the register page, the user kick page and the MSI-X structures (§3.1, §3.3)."""
    regs = consts(ABI / "regs.rs")
    pci = consts(ABI / "pci.rs")
    end = regs["REGS_END"]
    names = sorted(
        (off, name)
        for name, off in regs.items()
        if off < end and name not in ("REGS_END", "ADMINQ_OFFSET")
    )
    row, top = 17, 60
    svg = Svg(760, top + row * len(names) + 60, "rnic BAR0 map")
    svg.text(20, 28, "BAR0 (16 KiB): registers, user kick page, MSI-X", mono=False, weight="bold")
    pages = [
        (0x0000, f"0x0000  registers (to {end:#06x}), then reserved", "#e8f0fe"),
        (regs["USER_KICK_PAGE"], f"{regs['USER_KICK_PAGE']:#06x}  USER_KICK (the page alone)", "#fef7e0"),
        (pci["MSIX_TABLE_OFFSET"], f"{pci['MSIX_TABLE_OFFSET']:#06x}  MSI-X table (16 x 16 B)", "#e6f4ea"),
        (pci["MSIX_PBA_OFFSET"], f"{pci['MSIX_PBA_OFFSET']:#06x}  MSI-X PBA", "#fce8e6"),
    ]
    ph = 60
    for i, (_, label, fill) in enumerate(pages):
        y = top + i * (ph + 10)
        svg.rect(20, y, 300, ph, fill=fill)
        svg.text(30, y + 35, label)
    # The register page, zoomed.
    x = 380
    svg.text(x, 50, "page 0, 32-bit registers (§3.3)", mono=False, weight="bold")
    for i, (off, name) in enumerate(names):
        y = top + i * row
        svg.rect(x, y, 340, row, fill="#e8f0fe")
        svg.text(x + 8, y + 13, f"{off:#05x}  {name}")
    svg.line(320, top, x, top, dash=True)
    svg.line(320, top + ph, x, top + row * len(names), dash=True)
    return svg


def doorbell_page():
    """One 4 KiB page of the doorbell BAR (§4.2)."""
    db = consts(ABI / "doorbell.rs")
    slots_base, slot = db["SLOTS_BASE"], db["SLOT_SIZE"]
    nslots = (4096 - slots_base) // slot
    fields = [
        (db["NOTIFY_REQUEST"], 4, "NOTIFY_REQUEST", "device: 1 = kick me after a doorbell", "#fce8e6"),
        (db["CMDQ_DOORBELL"], 4, "CMDQ_DOORBELL", "page 0: command queue avail idx", "#e8f0fe"),
        (db["ADMINQ_DOORBELL"], 4, "ADMINQ_DOORBELL", "page 0 of the PF: admin queue", "#e8f0fe"),
        (db["RESET_COUNT"], 4, "RESET_COUNT", "page 0: resets so far (device)", "#fef7e0"),
        (db["RUNG_BITMAP"], 64, "RUNG_BITMAP", "1 bit per slot, driver sets", "#e6f4ea"),
        (slots_base, 8, "slot 0", "a queue's doorbell", "#ffffff"),
        (slots_base + slot, 8, "slot 1", "", "#ffffff"),
        (4096 - slot, 8, f"slot {nslots - 1}", "last slot of the page", "#ffffff"),
    ]
    row, top = 26, 60
    svg = Svg(700, top + row * (len(fields) + 1) + 50, "rnic doorbell page")
    svg.text(20, 28, f"Doorbell BAR (BAR2): 16 pages of 4 KiB; page p at p * 0x1000 (§4.2)",
             mono=False, weight="bold")
    y = top
    for off, size, name, what, fill in fields:
        if name == f"slot {nslots - 1}":
            svg.text(40, y + 17, "...", mono=True)
            y += row
        svg.rect(20, y, 260, row, fill=fill)
        svg.text(28, y + 17, f"{off:#05x}  {name}")
        svg.text(300, y + 17, f"{size} B  {what}".rstrip(), mono=False)
        y += row
    svg.text(20, y + 30, f"{nslots} slots of {slot} bytes from {slots_base:#x}; other offsets reserved",
             mono=False)
    return svg


def doorbell_sequence():
    """Posting work and the wake-up protocol between driver and device (§4.3, §4.4, §7.5)."""
    steps = [
        ("driver", "write the WQE into the send ring (guest memory)"),
        ("driver", "release fence"),
        ("driver", "store the queue's posted count in its doorbell slot"),
        ("driver", "set the slot's bit in RUNG_BITMAP"),
        ("driver", "full fence, then load NOTIFY_REQUEST of the page"),
        ("both", "NOTIFY_REQUEST = 0: the device polls; done, no kick"),
        ("kick", "NOTIFY_REQUEST != 0: write the page number to DOORBELL_KICK"),
        ("device", "wakes, clears NOTIFY_REQUEST, swaps RUNG_BITMAP words with 0"),
        ("device", "reads the slot, fetches the WQE (DMA), sends the packets"),
        ("device", "ACK arrives: writes the CQE, an EQE if the CQ is armed"),
        ("irq", "MSI-X vector of the EQ"),
        ("device", "idle for --poll-us: NOTIFY_REQUEST = 1 in every page,"),
        ("device", "full fence, one last look at RUNG_BITMAP, then sleep"),
    ]
    row, top = 34, 80
    dx, vx = 150, 560
    svg = Svg(720, top + row * len(steps) + 40, "rnic doorbell and notification sequence")
    svg.text(20, 28, "Posting a WQE and waking the device (§4.3, §4.4, §7.5)",
             mono=False, weight="bold")
    for x, who in ((dx, "driver (guest)"), (vx, "device (rnicd)")):
        svg.rect(x - 70, 45, 140, 24, fill="#e8f0fe")
        svg.text(x, 62, who, anchor="middle", mono=False, weight="bold")
        svg.line(x, 69, x, top + row * len(steps), dash=True)
    for i, (who, what) in enumerate(steps):
        y = top + i * row + 18
        if who == "driver":
            svg.rect(dx - 6, y - 12, 12, 18, fill="#fef7e0")
            svg.text(dx + 14, y, what, mono=False)
        elif who == "device":
            svg.rect(vx - 6, y - 12, 12, 18, fill="#e6f4ea")
            svg.text(vx - 14, y, what, anchor="end", mono=False)
        elif who == "kick":
            svg.line(dx, y, vx, y, arrow=True)
            svg.text((dx + vx) // 2, y - 5, what, anchor="middle", mono=False)
        elif who == "irq":
            svg.line(vx, y, dx, y, arrow=True, color="#b3261e")
            svg.text((dx + vx) // 2, y - 5, what, anchor="middle", mono=False, color="#b3261e")
        else:
            svg.text((dx + vx) // 2, y, what, anchor="middle", mono=False, color="#555555")
    return svg


def qp_states():
    """The QP state machine of MODIFY_QP (§7.8)."""
    w, h = 100, 40
    pos = {
        "RESET": (30, 90), "INIT": (290, 90), "RTR": (550, 90), "RTS": (810, 90),
        "ERR": (290, 270), "SQE": (550, 270), "SQD": (810, 270),
    }
    svg = Svg(960, 390, "rnic QP state machine")
    svg.text(20, 28, "QP states and MODIFY_QP transitions, with the attributes each requires (§7.8)",
             mono=False, weight="bold")
    for name, (x, y) in pos.items():
        fill = "#fce8e6" if name == "ERR" else "#e8f0fe"
        svg.rect(x, y, w, h, fill=fill, dash=(name == "SQE"))
        svg.text(x + w // 2, y + 25, name, anchor="middle", weight="bold")

    def across(a, b, lines):
        (x1, y1), (x2, _) = pos[a], pos[b]
        mid = y1 + h // 2
        svg.line(x1 + w, mid, x2, mid, arrow=True)
        for k, text in enumerate(lines):
            svg.text((x1 + w + x2) // 2, mid + 18 + 14 * k, text, anchor="middle", mono=False)

    across("RESET", "INIT", ["PKEY_INDEX, PORT,", "ACCESS_FLAGS"])
    across("INIT", "RTR", ["AV, PATH_MTU, DEST_QPN,", "RQ_PSN, MIN_RNR_TIMER,", "MAX_DEST_RD_ATOMIC"])
    across("RTR", "RTS", ["SQ_PSN, TIMEOUT,", "RETRY_CNT, RNR_RETRY,", "MAX_QP_RD_ATOMIC"])
    # RTS <-> SQD.
    x, y = pos["RTS"]
    svg.line(x + 35, y + h, x + 35, pos["SQD"][1], arrow=True)
    svg.line(x + 65, pos["SQD"][1], x + 65, y + h, arrow=True)
    svg.text(x + 30, y + h + 95, "drain", anchor="end", mono=False)
    svg.text(x + 72, y + h + 95, "resume", mono=False)
    # Attribute changes in place.
    for state in ("INIT", "RTS"):
        x, y = pos[state]
        svg.path(f"M {x + 40} {y} C {x + 25} {y - 35}, {x + 75} {y - 35}, {x + 60} {y}")
        svg.text(x + 82, y - 18, "attributes", mono=False)
    # The notes under the bottom row.
    x, y = pos["ERR"]
    svg.text(x + w // 2, y + h + 20, "from any state:", anchor="middle", mono=False)
    svg.text(x + w // 2, y + h + 35, "every WR flushed", anchor="middle", mono=False)
    x, y = pos["SQE"]
    svg.text(x + w // 2, y + h + 20, "no transition", anchor="middle", mono=False, color="#555555")
    svg.text(x + w // 2, y + h + 35, "leads here", anchor="middle", mono=False, color="#555555")
    x, y = pos["RESET"]
    svg.path(f"M {pos['ERR'][0]} {pos['ERR'][1] + h // 2} C {x + 50} {pos['ERR'][1] + h // 2}, "
             f"{x + 50} {y + h + 80}, {x + 50} {y + h}")
    svg.text(x + 75, y + h + 120, "to RESET from any state:", mono=False)
    svg.text(x + 75, y + h + 135, "WRs dropped, no completions", mono=False)
    svg.text(20, 375, "Any other pair is BAD_STATE; without the STATE bit a MODIFY_QP changes "
             "attributes in the current state.", mono=False, color="#555555")
    return svg


def rocev2_frame():
    """A RoCEv2 RDMA WRITE frame and its BTH (§7.11)."""
    parts = [
        ("Ethernet", 14, "#fef7e0"), ("IPv4", 20, "#e8f0fe"), ("UDP", 8, "#e8f0fe"),
        ("BTH", 12, "#e6f4ea"), ("RETH", 16, "#e6f4ea"), ("payload", 32, "#ffffff"),
        ("ICRC", 4, "#fce8e6"),
    ]
    scale = 6
    svg = Svg(820, 320, "rnic RoCEv2 frame")
    svg.text(20, 28, "A RoCEv2 RDMA WRITE FIRST/ONLY frame (§7.11); no FCS in rnic's frames",
             mono=False, weight="bold")
    x, y = 20, 50
    starts = {}
    for name, size, fill in parts:
        wdt = max(size * scale, 44) if name != "payload" else 150
        svg.rect(x, y, wdt, 40, fill=fill)
        svg.text(x + wdt // 2, y + 18, name, anchor="middle", weight="bold")
        svg.text(x + wdt // 2, y + 33, "0..PMTU B" if name == "payload" else f"{size} B",
                 anchor="middle")
        starts[name] = (x, wdt)
        x += wdt
    # BTH zoom: 3 words of 32 bits.
    bx, by = starts["BTH"]
    words = [
        [("OpCode", 8), ("SE", 1), ("M", 1), ("Pad", 2), ("TVer", 4), ("P_Key", 16)],
        [("F", 1), ("B", 1), ("reserved", 6), ("Destination QP", 24)],
        [("A", 1), ("reserved", 7), ("PSN", 24)],
    ]
    zx, zy, bit = 130, 150, 18
    svg.line(bx, 90, zx, zy, dash=True)
    svg.line(bx + by, 90, zx + 32 * bit, zy, dash=True)
    for i, word in enumerate(words):
        xx = zx
        for name, bits in word:
            svg.rect(xx, zy + i * 34, bits * bit, 34, fill="#e6f4ea")
            label = name if bits * bit > len(name) * 7 else name[:bits * bit // 8]
            svg.text(xx + bits * bit // 2, zy + i * 34 + 21, label, anchor="middle")
            xx += bits * bit
        svg.text(zx - 10, zy + i * 34 + 21, f"+{4 * i}", anchor="end")
    svg.text(zx, zy + 3 * 34 + 22, "BTH, big-endian; RETH: virtual address (8), R_Key (4), "
             "DMA length (4)", mono=False)
    svg.text(zx, zy + 3 * 34 + 42, "UDP destination port 4791; the ICRC covers the masked "
             "headers and the payload", mono=False)
    return svg


FIGURES = {
    "bar0.svg": bar0,
    "doorbell-page.svg": doorbell_page,
    "doorbell-sequence.svg": doorbell_sequence,
    "qp-states.svg": qp_states,
    "rocev2-frame.svg": rocev2_frame,
}


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] not in ([], ["--check"]):
        sys.exit(__doc__)
    stale = []
    for name, draw in FIGURES.items():
        path = HERE / name
        svg = draw().render()
        if check:
            if not path.exists() or path.read_text() != svg:
                stale.append(name)
        else:
            path.write_text(svg)
    if stale:
        sys.exit(
            f"docs/figures: {', '.join(stale)} differ from what render.py draws from the ABI "
            "crate: run python3 docs/figures/render.py and commit the result"
        )


if __name__ == "__main__":
    main()
