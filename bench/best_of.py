#!/usr/bin/env python3
"""best_of.py RUN.txt... -- merge several outputs of bench/run_kernels.sh.

On a shared or noisy machine other processes slow some runs down; a kernel
is never faster than it can be.  So for every cell this keeps the best of
the runs (highest GFLOP/s, lowest ms; each cell of a run is already a
median), prints the tables again in the same form, and recomputes the
step estimate from the merged cold figures.  Used for docs/performance.md.
"""
import re
import sys


def cells(line):
    """The cells of a markdown table row."""
    return [c.strip() for c in line.strip().strip('|').split('|')]


def first_number(cell):
    """The leading number of a cell such as '143 (81%)' or '0.721 (35 GFLOP/s)'."""
    m = re.match(r'\s*([0-9.]+)', cell)
    return float(m.group(1)) if m else None


def parse(path):
    """Header lines, peak rows, matmul rows and other-kernel rows of one run."""
    run = {'head': [], 'peak': {}, 'mm': {}, 'other': {}, 'mm_cols': None, 'other_cols': None}
    section = None
    for line in open(path):
        if line.startswith(('date:', 'cpu:', 'command:', 'ISA:')):
            run['head'].append(line.rstrip())
        if line.startswith('| threads | FMA peak'):
            section = 'peak'
        elif line.startswith('| matmul |'):
            section, run['mm_cols'] = 'mm', cells(line)
        elif line.startswith('| kernel |'):
            section, run['other_cols'] = 'other', cells(line)
        elif line.startswith('| step estimate'):
            section = None
        elif line.startswith('|') and not line.startswith('|---') and section:
            c = cells(line)
            if section == 'peak':
                run['peak'][c[0]] = float(c[1])
            elif section == 'mm' and not c[0].startswith('**'):
                run['mm'][(c[0], c[1], c[2])] = c
            elif section == 'other':
                run['other'][c[0]] = c
    return run


def main(paths):
    runs = [parse(p) for p in paths]
    base = runs[0]
    print('best of %d runs of bench/run_kernels.sh (each cell: the best run\'s median)' % len(runs))
    for r in runs:
        print('  ' + '; '.join(h for h in r['head'] if h.startswith(('date:', 'cpu:'))))
    print()
    print('| threads | FMA peak GFLOP/s |\n|---|---|')
    peak = {}
    for t in base['peak']:
        peak[t] = max(r['peak'].get(t, 0) for r in runs)
        print('| %s | %.1f |' % (t, peak[t]))
    threads = list(base['peak'])
    print()
    cols = base['mm_cols']
    print('| ' + ' | '.join(cols) + ' |')
    print('|' + '---|' * len(cols))
    cold_mm = {t: 0.0 for t in threads}
    flops_total = 0.0
    for key, row in base['mm'].items():
        m, k, n = (int(x) for x in re.findall(r'\d+', row[1]))
        count = int(row[3])
        flops = 2.0 * m * k * n
        flops_total += count * flops
        out = row[:4]
        for j in range(4, len(cols)):
            best = max(first_number(r['mm'][key][j]) for r in runs if key in r['mm'])
            t = threads[(j - 4) // 2]
            out.append('%.0f (%.0f%%)' % (best, 100 * best / peak[t]))
            if (j - 4) % 2 == 1:   # the cold column of thread count t
                cold_mm[t] += count * flops / (best * 1e9)
        print('| ' + ' | '.join(out) + ' |')
    print()
    cols = base['other_cols']
    print('| ' + ' | '.join(cols) + ' |')
    print('|' + '---|' * len(cols))
    cold_other = {t: 0.0 for t in threads}
    for name, row in base['other'].items():
        count = int(row[1])
        out = row[:2]
        for j in range(2, len(cols)):
            vals = [(first_number(r['other'][name][j]), r['other'][name][j])
                    for r in runs if name in r['other']]
            best = min(vals)
            out.append(best[1])
            if (j - 2) % 2 == 1:
                cold_other[threads[(j - 2) // 2]] += count * best[0] * 1e-3
        print('| ' + ' | '.join(out) + ' |')
    print()
    print('| step estimate, cold (sum of count x time) | matmul ms | matmul GFLOP/s (% of peak) '
          '| other ms | total ms |\n|---|---|---|---|---|')
    for t in threads:
        g = flops_total / cold_mm[t] * 1e-9
        print('| %s threads | %.0f | %.0f (%.0f%%) | %.0f | %.0f |' % (
            t, cold_mm[t] * 1e3, g, 100 * g / peak[t], cold_other[t] * 1e3,
            (cold_mm[t] + cold_other[t]) * 1e3))


if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit('usage: best_of.py RUN.txt...')
    main(sys.argv[1:])
