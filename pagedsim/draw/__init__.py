"""Pictures of the block manager, drawn from its recorded trace (needs matplotlib).

    style.py      colourblind-safe palette, sequence colours, byte-stable PNG saving
    render.py     one Snapshot -> one figure: physical blocks, free list, block tables, caption
    animate.py    a trace -> PNG frames, a GIF (FuncAnimation + PillowWriter), HTML (to_jshtml)
    trace_viewer.py  step through a trace in a window; stepping back re-renders the earlier snapshot
    figures.py    `pagedsim figures`: runs every registered figure maker
    figures_ch3.py, anatomy.py, flow.py, tradeoff.py   chapter 3's figures (3.2 - 3.7)
    figures_workloads.py, figures_labs.py              workload / eviction and lab figures

The simulator core never imports this package; it only records snapshots.
"""
