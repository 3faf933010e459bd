#!/usr/bin/env python3
"""compare_ds4_reference.py — our logits against antirez/ds4's reference steps on the full-size q2 file
(../shared/spec/data/ds4_reference, README there). Used by scripts/gpu_reference.sh on the GPU machine.

  tokens:  compare_ds4_reference.py tokens REF.json PROMPT.ids OUT.ids
           writes the teacher-forced sequence: the prompt ids, then ds4's selected token of every step but
           the last, so row P-1+s of `ds4 run --dump-logits` holds our logits for ds4's step s.
  compare: compare_ds4_reference.py compare REF.json PROMPT.ids LOGITS.f32 N_VOCAB [TOL] [LABEL]
           per step: our top-20 set vs ds4's, max |our logit - ds4 logit| over ds4's top-20 tokens, argmax.
           Exit 0 when every step has the same top-20 set (a swap at rank 20 between two tokens whose
           logits differ by less than TOL is reported, not failed) and max |Δ| <= TOL (default 0.03).
Reads only the rows it needs (seek + array, no numpy); deliberately no plotting and no model knowledge."""
import array, heapq, json, os, sys


def load_ids(path):
    return [int(x) for x in open(path).read().split()]


def steps_of(ref_path):
    ref = json.load(open(ref_path))
    return ref['steps']


def cmd_tokens(ref_path, ids_path, out_path):
    ids = load_ids(ids_path)
    steps = steps_of(ref_path)
    seq = ids + [s['selected']['id'] for s in steps[:-1]]
    with open(out_path, 'w') as f:
        f.write('\n'.join(str(t) for t in seq) + '\n')
    print(f'{out_path}: {len(ids)} prompt ids + {len(steps) - 1} ds4 tokens = {len(seq)}')


def cmd_compare(ref_path, ids_path, logits_path, n_vocab, tol=0.03, label=''):
    P = len(load_ids(ids_path))
    steps = steps_of(ref_path)
    n_vocab = int(n_vocab)
    tol = float(tol)
    n_rows = os.path.getsize(logits_path) // (4 * n_vocab)
    if n_rows < P - 1 + len(steps):
        print(f'{label}: logits file has {n_rows} rows, need {P - 1 + len(steps)}')
        return 1
    fl = open(logits_path, 'rb')

    def read_row(r):
        fl.seek(4 * n_vocab * r)
        a = array.array('f')
        a.frombytes(fl.read(4 * n_vocab))
        if sys.byteorder != 'little':
            a.byteswap()
        return a
    ok = True
    worst = 0.0
    set_diffs = 0
    argmax_diffs = 0
    print(f'{label}: {len(steps)} steps after {P} prompt tokens, tolerance {tol}')
    print(' step  ds4-token  ours  max|dlogit|  top20-set  (ds4 top1 logit / ours)')
    for s, st in enumerate(steps):
        row = read_row(P - 1 + s)
        ref_ids = [e['token']['id'] for e in st['top_logprobs']]
        ref_logit = [e['logit'] for e in st['top_logprobs']]
        k = len(ref_ids)
        our_top = heapq.nlargest(k, range(n_vocab), key=row.__getitem__)
        md = max(abs(row[i] - v) for i, v in zip(ref_ids, ref_logit))
        worst = max(worst, md)
        ours_set, ref_set = set(int(i) for i in our_top), set(ref_ids)
        missing, extra = ref_set - ours_set, ours_set - ref_set
        verdict = 'same'
        if missing:
            # A swap at the boundary: the tokens exchanged are within tol of ds4's 20th logit.
            kth = min(ref_logit)
            near = all(abs(row[i] - kth) <= tol for i in extra) and all(
                abs(ref_logit[ref_ids.index(i)] - kth) <= tol for i in missing)
            verdict = f'{len(missing)} swapped' + (' (at rank 20, within tol)' if near else '')
            set_diffs += 1
            if not near:
                ok = False
        sel = st['selected']['id']
        if int(our_top[0]) != sel:
            argmax_diffs += 1
        if md > tol:
            ok = False
        print(f' {s:4d}  {sel:9d}  {int(our_top[0]):6d}  {md:10.4f}  {verdict:>9s}  ({ref_logit[0]:.4f} / {row[ref_ids[0]]:.4f})')
    print(f'{label}: {"PASS" if ok else "FAIL"}  max|dlogit| {worst:.4f} (tol {tol}), top-20 set differs at '
          f'{set_diffs} of {len(steps)} steps, argmax differs at {argmax_diffs}')
    return 0 if ok else 1


if __name__ == '__main__':
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == 'tokens':
        cmd_tokens(*a[1:])
        sys.exit(0)
    if len(a) >= 5 and a[0] == 'compare':
        sys.exit(cmd_compare(*a[1:]))
    print(__doc__)
    sys.exit(2)
