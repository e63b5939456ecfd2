#!/usr/bin/env python3
"""Generate bench.S (one asm function per test) and tests.h (test table)."""
OPS = {  # kind: (template, regclass, reads_dest)
 'vpdpbusd':   ('vpdpbusd zmm{r}, zmm30, zmm31', 'z', True),
 'vpmulld':    ('vpmulld zmm{r}, zmm30, zmm31', 'z', False),
 'vcvtdq2ps':  ('vcvtdq2ps zmm{r}, zmm30', 'z', False),
 'vfmadd231ps':('vfmadd231ps zmm{r}, zmm30, zmm31', 'z', True),
 'vpdpwssd':   ('vpdpwssd zmm{r}, zmm30, zmm31', 'z', True),
 'vpmaddwd':   ('vpmaddwd zmm{r}, zmm30, zmm31', 'z', False),
 'vpmaddubsw': ('vpmaddubsw zmm{r}, zmm30, zmm31', 'z', False),
 'vpshufb':    ('vpshufb zmm{r}, zmm30, zmm31', 'z', False),
 'vpermb':     ('vpermb zmm{r}, zmm30, zmm31', 'z', False),
 'vpandd':     ('vpandd zmm{r}, zmm30, zmm31', 'z', False),
 'vpsrlw':     ('vpsrlw zmm{r}, zmm30, 3', 'z', False),
 'vpternlogd': ('vpternlogd zmm{r}, zmm30, zmm31, 0x96', 'z', True),
 'vpaddd':     ('vpaddd zmm{r}, zmm30, zmm31', 'z', False),
 'vmovdqu8kz': ('vmovdqu8 zmm{r}{{k1}}{{z}}, zmm30', 'z', False),
 'vpmovm2b':   ('vpmovm2b zmm{r}, k1', 'z', False),
 'kmovq_load': ('kmovq k{r}, qword ptr [rsi+128]', 'k', False),
 'vptestmb':   ('vptestmb k{r}, zmm30, zmm31', 'k', False),
 'vpternlogd_same': ('vpternlogd zmm{r}, zmm{r}, zmm{r}, 0x96', 'z', True),
 'kmovq_gpr':  ('kmovq k{r}, rax', 'k', False),
 'vpcmpeqb_k': ('vpcmpeqb k{r}, zmm30, zmm31', 'k', False),
 'vaddps':     ('vaddps zmm{r}, zmm{r}, zmm30', 'z', True),
 'vmulps':     ('vmulps zmm{r}, zmm30, zmm31', 'z', False),
 'vgf2p8affineqb': ('vgf2p8affineqb zmm{r}, zmm30, zmm31, 0', 'z', False),
 'vpsllvd':    ('vpsllvd zmm{r}, zmm30, zmm31', 'z', False),
 'vpslld_x':   ('vpslld zmm{r}, zmm30, xmm31', 'z', False),
 'bcast_gpr':  ('vpbroadcastd zmm{r}, eax', 'z', False),
 'vpsubd':     ('vpsubd zmm{r}, zmm30, zmm31', 'z', False),
 'vcvtph2ps':  ('vcvtph2ps zmm{r}, ymm30', 'z', False),
 'bcast_mem':  ('vpbroadcastd zmm{r}, dword ptr [rsi+64]', 'z', False),
 'dpb_mem':    ('vpdpbusd zmm{r}, zmm30, dword ptr [rsi+64]{{1to16}}', 'z', True),
}
# (name, [(kind,count) per group], unroll)
TESTS = [('1x '+k, [(k, 1)], 24) for k in OPS]
MIX = [
 ('A', [('vpdpbusd',4),('vpmulld',1)]),
 ('B', [('vpdpbusd',4),('vcvtdq2ps',1)]),
 ('C', [('vpdpbusd',4),('vfmadd231ps',1)]),
 ('D', [('vpdpbusd',4),('vcvtdq2ps',1),('vfmadd231ps',1)]),
 ('E', [('vpdpbusd',4),('vpdpwssd',1)]),
 ('F', [('vpdpbusd',4),('vpshufb',2)]),
 ('G', [('vpdpbusd',4),('vpandd',2),('vpsrlw',1)]),
 ('H', [('vpdpbusd',4),('vmovdqu8kz',2)]),
 ('I', [('vpdpbusd',4),('vgf2p8affineqb',2)]),
 ('J', [('vpdpbusd',4),('vpaddd',4)]),
 ('K', [('vpdpbusd',4),('vpternlogd',2)]),
 ('L', [('vpdpbusd',8),('vpmulld',1),('vpaddd',1)]),
 ('M', [('vpdpbusd',8),('vcvtdq2ps',1),('vfmadd231ps',1)]),
 # more mixes: the int8 fold's and unpacks' instructions next to the dots
 ('x1', [('vpdpbusd',4),('vcvtdq2ps',4)]),
 ('x2', [('vpdpbusd',4),('vpshufb',4)]),
 ('x3', [('vpdpbusd',4),('vpermb',2)]),
 ('x4', [('vpdpbusd',4),('vmovdqu8kz',4)]),
 ('x5', [('vpdpbusd',4),('vpmovm2b',4)]),
 ('x6', [('vpdpbusd',4),('vptestmb',2)]),
 ('x7', [('vpdpbusd',4),('kmovq_load',2)]),
 ('x8', [('vpdpbusd',4),('vpmaddubsw',1)]),
 ('x9', [('vpdpbusd',4),('vpmaddwd',1)]),
 ('x10', [('vpdpbusd',4),('vpternlogd',1)]),
 ('x11', [('vpdpbusd',4),('vpternlogd_same',2)]),
 ('x12', [('vpdpbusd',4),('vpsrlw',2)]),
 ('x13', [('vpdpbusd',4),('vpandd',4)]),
 ('x14', [('vpdpbusd',4),('vcvtdq2ps',2),('vpshufb',2)]),
 ('x16', [('vpdpbusd',4),('kmovq_load',1)]),
 ('x17', [('vpdpbusd',4),('kmovq_gpr',1)]),
 ('x18', [('vpdpbusd',4),('vptestmb',1)]),
 ('x19', [('vpdpbusd',4),('vpcmpeqb_k',1)]),
 ('x20', [('vpdpbusd',4),('vaddps',2)]),
 ('x21', [('vpdpbusd',4),('vmulps',1)]),
 ('x22', [('vpdpbusd',8),('vcvtdq2ps',1),('vaddps',1)]),
 ('x15', [('vpdpbusd',4),('vpaddd',2),('vpternlogd',2)]),
 ('y1', [('vpdpbusd',4),('vpsllvd',1)]),
 ('y2', [('vpdpbusd',4),('vpsllvd',2)]),
 ('y3', [('vpdpbusd',4),('bcast_gpr',1)]),
 ('y4', [('vpdpbusd',4),('vpslld_x',1)]),
 ('y5', [('vpdpbusd',4),('vcvtph2ps',1)]),
 ('y6', [('vpdpbusd',4),('vpsubd',2),('vcvtdq2ps',2)]),
 ('b1', [('vpdpbusd',4),('vpaddd',4),('bcast_mem',2)]),
 ('b2', [('vpdpbusd',4),('vpaddd',4),('bcast_mem',4)]),
 ('b3', [('vpdpbusd',4),('bcast_mem',4)]),
 ('b4', [('vpdpbusd',4),('vpaddd',6)]),
 ('b5', [('vpdpbusd',4),('vpaddd',8)]),
 ('b6', [('dpb_mem',4),('vpaddd',4)]),
 ('b7', [('vpdpbusd',4),('vpandd',3),('vpsrlw',1)]),
 ('b8', [('vpdpbusd',4),('vpandd',2),('vpsrlw',2)]),
 ('k1shuf', [('vpdpbusd',8),('vpshufb',8),('vpandd',2),('vpsrlw',1)]),
 ('k1mask', [('vpdpbusd',8),('kmovq_load',8),('vmovdqu8kz',8)]),
 ('k1test', [('vpdpbusd',8),('vptestmb',8),('vmovdqu8kz',8)]),
 ('k1shift', [('vpdpbusd',8),('vpsrlw',7),('vpandd',8)]),
 ('k1gfni', [('vpdpbusd',8),('vgf2p8affineqb',8)]),
 ('k1perm', [('vpdpbusd',8),('vpermb',8),('vpandd',2),('vpsrlw',1)]),
]
for n, g in MIX:
    nd = g[0][1]
    TESTS.append((n + ' ' + '+'.join(f'{c}{k}' for k, c in g), g, 24 // nd))

def body(group, unroll):
    kinds = [k for k, _ in group]
    pools = {}
    zfree = list(range(30))
    if 'vpdpbusd' in kinds:
        pools['vpdpbusd'] = list(range(12))  # exactly 12 accumulators
        zfree = list(range(12, 30))
    zk = [k for k in kinds if k != 'vpdpbusd' and OPS[k][1] == 'z']
    per = len(zfree) // max(1, len(zk))
    for i, k in enumerate(zk):
        pools[k] = zfree[i*per:(i+1)*per]
    for k in kinds:
        if OPS[k][1] == 'k':
            pools[k] = list(range(2, 8))
    # interleave within a group by fractional position
    seq = []
    for k, c in group:
        seq += [((i + 0.5) / c, j, k) for j, i in [(kinds.index(k), i) for i in range(c)]]
    seq = [k for _, _, k in sorted(seq)]
    ctr = {k: 0 for k in kinds}
    out = []
    for _ in range(unroll):
        for k in seq:
            p = pools[k]
            out.append(OPS[k][0].format(r=p[ctr[k] % len(p)]))
            ctr[k] += 1
    return out, pools

asm = ['.intel_syntax noprefix', '.text']
asm += ['.globl add_chain', 'add_chain:', '  mov rcx, rdi', '  xor eax, eax', '.Lac:']
asm += ['  add rax, 1'] * 100 + ['  dec rcx', '  jnz .Lac', '  ret']
hdr = ['typedef void (*testfn)(unsigned long, const void*);']
names = []
for ti, (name, group, unroll) in enumerate(TESTS):
    fn = f't{ti}'
    lines, pools = body(group, unroll)
    asm += [f'.globl {fn}', f'{fn}:',
            '  vmovdqu64 zmm30, [rsi]', '  vmovdqu64 zmm31, [rsi+64]', '  kmovq k1, qword ptr [rsi+128]']
    asm += [f'  vpxord zmm{r}, zmm{r}, zmm{r}' for r in range(30)]
    asm += ['  mov rcx, rdi', '.p2align 6', f'.L{fn}:'] + ['  ' + l for l in lines]
    asm += ['  dec rcx', f'  jnz .L{fn}', '  vzeroupper', '  ret']
    hdr.append(f'void {fn}(unsigned long, const void*);')
    names.append((fn, name, unroll, len(lines) // unroll,
                  ' '.join(f'{k}:{len(p)}' for k, p in pools.items())))
asm.append('.section .note.GNU-stack,"",@progbits')
open('bench.S', 'w').write('\n'.join(asm) + '\n')
hdr.append('struct test { testfn fn; const char *name; int unroll; int group_insns; const char *pools; };')
hdr.append('static const struct test TESTS[] = {')
hdr += [f'  {{{fn}, "{n}", {u}, {gi}, "{p}"}},' for fn, n, u, gi, p in names]
hdr.append('};')
open('tests.h', 'w').write('\n'.join(hdr) + '\n')
