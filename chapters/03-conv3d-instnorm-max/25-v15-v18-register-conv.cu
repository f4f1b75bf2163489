/*
 * v15 to v18: the whole model with the conv's output in registers and x in shared memory
 * (Hopper)
 *
 * One kernel, k_register_conv, serves all four. v16 differs where `WGMMA` says: the conv's
 * inner loop (conv_wgmma against v15's conv_mma_sync, with the fence that hands B to it) and the
 * exchange of the statistics (pushed by st.async: cluster_push and cluster_merge_pushed, their
 * buffer and mbarriers, against v15's cluster_merge). v17 is v16 where `TEAM` says: no cluster,
 * the blocks of a sample in a team of a cooperative launch, the exchange through L2
 * (team_publish and team_merge), y folded (lane_max_folded), and the conv in 10 steps with its
 * 81st column by FFMA. v18 is v17 where `HALVES` says: each half of the block a member of its
 * own team, so that one half's conv runs while the other's statistics, exchange and y do.
 *
 * v15: v14's tensor-core conv with its output in registers and x in shared memory
 *
 * Defect of v14: its gathers of x wait on L1 misses (ncu: 3.78 cycles an instruction of long
 * scoreboard, 77% L1 hits): its two 113 KB slices of conv output fill shared memory and leave
 * about 28 KB of L1 for x.
 * Change, in three steps, each measured (not predicted) until the third:
 * 1. The conv's output stays where the mma leaves it, in the accumulators: a warp keeps 7 tiles of
 *    16 corners x 16 channels, 56 of each thread's 128 registers (512 threads x 128 fill the SM's
 *    64K registers: one block an SM). A corner is a position of the input's index space, od (H W) +
 *    oh W + ow; corner c's taps are x[c + tap offset]. 14 x 32 x 32 = 14336 corners a sample, 8
 *    blocks of 16 warps x 7 tiles x 16 = 1792 corners each (the block's span); the 12% that are not
 *    positions (oh or ow past the output) are computed and dropped, and in exchange a tile's rows
 *    stand a fixed 4 corners apart and its tiles 256 (the layout is at the loop), so the loop
 *    addresses x with immediate offsets, no division. Shared memory now holds the block's window of
 *    x (the span's corners and their taps: 1792 + 2 x 1024 + 2 x 32 + 2 = 3906 floats a channel, 47
 *    KB), so a gather is an LDS. Each LDS of A reads 4 columns at 8 rows 4 corners apart, lane g's
 *    word in bank 4 g plus its column's offset mod 4: the 32 words fall in 32 banks when the 4
 *    columns' offsets differ mod 4, so v15_columns deals the taps, sorted by offset mod 4, over the
 *    column groups (here 27 taps share one class, so 5 of the 22 groups still conflict). The
 *    statistics: two passes over the registers (mean, then centred squares), then v10's exchange
 *    (cluster_merge). Measured (H100, medians of 50, three interleaved rounds): 0.1847, 0.1834,
 *    0.1833 ms against v14's 0.1846, 0.1830, 0.1830: a tie. The conv's loop is 24 instructions a
 *    tile and step against v14's 38 (v15's final loop: 26), and the gathers no longer wait (SASS;
 *    ncu: 16% of the shared-memory wavefronts are bank conflicts, the 5 groups), but the code
 *    around the loop grew: 67.5 million instructions in all against v14's 66.2 (ncu).
 * 2. The rest, trimmed: the statistics of c, scaled by m and m^2 afterwards; y as one FMA per
 *    value, m clamp(c (m rstd) - mean rstd); the corners' positions in y from a table the block
 *    computes once; each step's offsets read one step early. 0.1793, 0.1771 ms against v14's
 *    0.1833, 0.1836 (two rounds). A timeline of this form (not committed: each block writing
 *    %globaltimer at its phase boundaries, medians): 2.94 us loading the window and splitting
 *    the weights, 9.92 us of conv, 3.10 us of statistics and exchange, 2.18 us of y. Only 15
 *    clusters of 8 fit at once (cudaOccupancyMaxActiveClusters: a cluster's 8 SMs must share a
 *    GPC), so 1024 blocks run in 9 waves on 120 SMs, and with one block an SM nothing overlaps a
 *    block's phases.
 * 3. Persistent clusters: the 15 that fit each take samples n, n + 15, ..., split the weights once,
 *    and copy the next sample's window (cp.async, two buffers, 94 KB) while this one computes.
 *    Predicted from the timeline: 9 rounds of 18.1 - 2.9 = 15.2 us, about 0.14 ms.
 * Measured (H100, medians of 50, three interleaved rounds, in v15's first recording call,
 * 2026-11-25, commit 3059ec6): 0.1523, 0.1522, 0.1523 ms against v14's 0.1841, 0.1842, 0.1841, 17%
 * less time (1.21x).
 * Revised beside v16: the window's copy loop advances its source and destination pointers
 * instead of computing both addresses for every element, and writes the zeros past x's end once a
 * buffer instead of every sample; B lies in wgmma's layout, read as 8 LDS a step (4 of b_hi, 4 of
 * b_lo) where 2 LDS.128 read it; the block's count of positions is taken once. ncu: 58.1 million
 * instructions (59.6 in 3059ec6's profile, before a redundant barrier went). Measured on
 * 2026-11-26: 0.1511, 0.1520, 0.1521 ms against v14's 0.1845, 0.1843, 0.1847, 18% less time; the
 * same as 3059ec6's 0.1523 within the spread between calls, so not claimed as a gain. The batch
 * sweep puts a round at 16.1 us (the record's 0.1507 ms [v15 model_fwd] against 0.0221
 * [v15 model_fwd @8] at 8 samples, over 8 rounds), 0.9 us over the prediction, not analysed. ncu
 * (H100, 2026-11-26, this code; the kernel alone, at its locked clocks): 183.8 us against v14's
 * 223.4; the tensor pipe 37.5% busy, issue slots 48.0%, and the
 * first stall is now the tensor pipe itself (math pipe throttle, 2.07 cycles an instruction), then
 * fixed latencies (1.52) and ready warps waiting for the slot (1.34). What is left: the conv at
 * mma.sync's rate, 9 rounds for 8.53 samples a cluster, and the 5.3 us a round of statistics,
 * exchange and y (the timeline's 3.10 and 2.18) that no other block on the SM overlaps. y's error
 * in make test: rel_l2 3.2e-7 at 1x3x16x32x32, 3.0e-7 at 2x3x4x35x37 (v14: 2.7e-7 to 2.9e-7).
 * Tried (the README's list): 8 tiles a warp, clusters of 7 (the first form; 128 registers, 15
 * clusters still): 0.1995, 0.1975, 0.1977 against 0.1847, 0.1834, 0.1833.
 * Recorded (the README's table, 2026-11-26): 0.1507 ms [0.1499 - 0.1512]
 * [v15 model_fwd median_ms min_ms max_ms], 27.7 TFLOP/s [v15 model_fwd], 3.91x
 * [compile/v15 model_fwd] torch.compile's 0.590 ms [compile model_fwd].
 *
 * v16: v15 with the conv on Hopper's warpgroup MMA (wgmma; sm_90a code: H100, H200) and the
 * statistics pushed to the cluster's blocks
 *
 * Defect of v15: its first stall is the tensor pipe (above). mma.sync is a warp's instruction of
 * 16 x 8 x 8: a tile and step takes six of them (two channel halves, three products), 462 a
 * sample in each warp, and the pipe throttles their issue.
 * Change, in six steps, each measured:
 * 1. wgmma.mma_async m64n16k8 (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-
 *    Accumulate"): a warpgroup, 4 consecutive warps, multiplies 64 x 8 by 8 x 16 in one
 *    instruction that runs asynchronously. A comes from registers, each warp its 16 rows in
 *    mma.sync's A layout, so v15's gathers and splits stay as they are; B comes from shared
 *    memory through a descriptor (its layout: v15_smem); the accumulators keep mma.sync's layout,
 *    so the statistics and y are unchanged. A tile and step is 3 wgmma where it was 6 mma.sync,
 *    committed as one group; A's registers alternate between two buffers, and before one is
 *    rewritten, wait_group 1 ensures the group that read it, two tiles back, is done. In SASS
 *    (nvcc 13.0) a tile and step is 21 instructions: 4 LDS, 12 for the splits, a fence
 *    (WARPGROUP.ARRIVE), 3 HGMMA and the wait (WARPGROUP.DEPBAR); ptxas keeps the wgmmas in
 *    flight (it reports C7512 where it must serialise them).
 *    Predicted: if the conv's 9.9 us a round (the timeline of v15's step 2) were all the tensor
 *    pipe's, half the instructions there could take up to 5 us off each of the 9 rounds: 0.1526 -
 *    0.045, about 0.108 ms.
 *    Measured (H100, medians of 50, three interleaved rounds, 2026-11-26, commit 9fa0206): 0.1440,
 *    0.1440, 0.1440 ms against v15's 0.1511, 0.1520, 0.1521, 5% less time (an earlier call:
 *    0.1434, 0.1433, 0.1436 against 0.1510, 0.1509, 0.1509). Far short of the prediction. ncu
 *    (that code): 173.8 us against v15's 183.8, 56.4 million instructions, issue slots 49.2%; the
 *    math pipe throttle fell from 2.07 to 0.44 cycles an instruction, but waits on the LDS (short
 *    scoreboard) rose from 0.32 to 1.35, and fixed latencies (the splits' dependent chains) stay
 *    at 1.50: with the tensor pipe no longer throttling, the gathers and splits that feed it are
 *    the limit. (ncu's tensor-pipe busy figure, 26.4% against v15's 37.5% for the same products
 *    in less time, does not count the two instructions alike.) A %globaltimer timeline of that
 *    code (an instrumented build, not committed; thread 0 of each block, medians over the samples
 *    after the first) put a round at 1.3 us before the conv (the window's wait and barrier, the
 *    next window's copies issued), 8.5 us of conv (v15: 9.6), 1.4 us of the block's statistics,
 *    2.3 us of exchange and 1.7 us of y. A second build, with a stamp after the cluster barrier,
 *    split the exchange into 0.8 us at the barrier and 1.3 us after it: the remote loads of the 8
 *    blocks' triples and Chan's merge tree of three dependent rounds, each with a division.
 * 2. The exchange pushed (cluster.cuh, cluster_push and cluster_merge_pushed), in two moves,
 *    neither predicted, each measured. First, each block stored its triples into every block's
 *    shared memory before the cluster barrier, where v15's form loads the others' after it, and
 *    merged them as two sums (the count and sum, then the centred squares) instead of Chan's
 *    tree. Three forms in one call, each with the timeline instrumentation: pulled, Chan's tree
 *    0.1471, 0.1476, 0.1458 ms; pushed, Chan's tree 0.1422, 0.1408, 0.1411; pushed, two sums
 *    0.1407, 0.1399, 0.1393 (kept); the time after the barrier 1.18, 0.54, 0.32 us. Committed so
 *    (b91f924: 0.1380, 0.1380, 0.1381 against v15's 0.1514, 0.1514, 0.1512; ncu 166.3 us, and
 *    0.37 cycles an instruction at memory barriers: the cluster barrier's release, MEMBAR.ALL.GPU
 *    in SASS). Then, no cluster barrier a sample: the triples go by st.async, which counts its
 *    bytes down on the receiving block's mbarrier, and each block waits on its own mbarrier for
 *    the ncl x 16 it expects: 0.1332, 0.1330, 0.1330 ms against b91f924's 0.1391, 0.1384, 0.1384
 *    (same call), 4% less time. A block's own triple is a plain store, the peers' st.async. (v15
 *    with the first move's exchange: 0.1458 against 0.1531, instrumented builds in the call of
 *    the three forms; v15 keeps the pulled form, so that each version is one step.)
 * Measured, the final code (H100, medians of 50, three interleaved rounds of the recording call,
 * 2026-11-26): 0.1328, 0.1327, 0.1326 ms against v15's 0.1514, 0.1513, 0.1512, 12% less time; the
 * batch sweep puts a round at 14.1 us. ncu (that code): 158.7 us, 55.5 million instructions,
 * issue slots 53.2% busy; per instruction, 1.50 cycles of fixed latencies, 1.48 waiting on LDS,
 * 1.09 for the issue slot, 0.77 of dispatch stalls, 0.44 of math pipe throttle, 0.41 waiting on
 * the wgmma groups, and no memory-barrier stall left. ptxas (nvcc 13.0): 128 registers, and 48
 * bytes spilled, their 36 loads and stores all outside the conv's loop (v15: none). y's error in
 * make test: rel_l2 3.3e-7 at 1x3x16x32x32, 2.9e-7 at 2x3x4x35x37 (v15: 3.2e-7, 3.0e-7; the
 * merge's sums round differently from Chan's tree).
 * Tried (the README's list): x split once a sample, into windows of x_hi and x_lo, so that a tile
 * and step is 8 LDS and no split (13 instructions against 21): 0.1785, 0.1788, 0.1772 ms against
 * step 1's 0.1445, 0.1445, 0.1435 (same call). It doubles the shared-memory loads (17.2 million
 * wavefronts against 9.5) and the warps wait on them: short scoreboard 3.74 cycles an instruction,
 * MIO throttle 0.94. Its first form, with three A buffers so that each tile's LDS had a tile's
 * time to land, ran out of registers: ptxas serialised every wgmma (C7512). And each warp's own
 * triples pushed, with no block-level statistics (no block barriers, but 16 times the remote
 * stores): 0.2087, 0.2093, 0.2088 ms against 0.1412, 0.1410, 0.1410 (b91f924's form, a cluster
 * barrier a sample, its merge generalised to any count of triples).
 * The block's statistics with one barrier instead of three (each warp's mean and M2 from its
 * registers, then warp w merging the 16 warps' of channel w as two sums): 0.1354, 0.1353, 0.1361
 * ms against 17d9b94's 0.1333, 0.1339, 0.1334 (same call; ptxas spills 72 bytes against 48).
 * Recorded, steps 1 and 2 (the README's table then, a later call with the same code): 0.1346 ms
 * [0.1338 - 0.1386], 31.1 TFLOP/s (the old flush).
 * 3. The split truncates (common/tf32.cuh's split_trunc, for A only). Defect of the form above:
 *    each gathered value reaches the wgmma through three dependent instructions (split_fast:
 *    add half of tf32's last place, clear the 13 low bits, subtract), 12 of a tile and step's
 *    21, and fixed latencies lead ncu's stalls. Change: clear the bits without rounding (hi = v
 *    truncated, lo = v - hi, exact): 2 instructions a value, 17 a tile and step. The price:
 *    |lo| < 2^-10 |v| where it was 2^-11, a product's error bound about 2^-19 of it against
 *    1.25 x 2^-20 (tf32.cuh). Prediction, from the instruction count only: 19% fewer in the loop
 *    and one fewer on each value's chain; if the conv's 8.5 us a round shrank in proportion, 1.6
 *    us a round, up to 15 us over the 9 rounds, and less, since issue slots were only 53% busy.
 *    Measured (H100, medians of 50, three interleaved rounds): 0.1284, 0.1280, 0.1285 ms against
 *    the form above's 0.1345, 0.1344, 0.1339 in the recording call (an earlier call: 0.1285,
 *    0.1285, 0.1286 against 0.1340, 0.1342, 0.1342), 5.4 to 6.4 us (4.0 to 4.8%) less round by
 *    round; the
 *    batch sweep puts a round at 13.3 us against 14.1. ncu (the kernel alone, the recording
 *    call): 152.5 us against 159.2, 50.5 million instructions against 55.5, issue slots 50.5%
 *    busy against 53.3%, 7.92 cycles between a warp's instructions against 7.52: the
 *    instructions went, the waits between them stayed. y's error in make test: rel_l2 3.0e-7 at
 *    1x3x16x32x32 and 3.0e-7 at 2x3x4x35x37 (before: 3.3e-7, 2.9e-7), no larger than the
 *    differences between forms that round alike.
 *    Recorded (the README's table then, the same call): 0.1276 ms [0.1268 - 0.1283].
 * A timeline of that form (an instrumented build, not committed: thread 0 of each block writing
 * %globaltimer at the phase boundaries; medians over the samples after each block's first, two
 * runs) put a round at 1.18 - 1.34 us from its start to the conv (the window's wait, the
 * barrier, the next window's copies issued), 7.84 - 7.94 of conv, 1.25 - 1.28 of statistics,
 * 0.80 - 0.86 of exchange and 1.76 of y. The first phase's tenth percentile, 0.10 us, is the
 * last round, which issues no copies: issuing them took about 1.1 us a round.
 * 4. The window's copies 8 bytes wide. Defect: 11,718 cp.async of 4 bytes a block and sample
 *    (the 3 channels' 3906 floats), 23 a thread, issued while the warps wait to start the conv.
 *    Change: v16's wstride is 2 mod 4 instead of 1 mod 4, so that, where D H W is even, every
 *    channel's source and destination start 8-byte aligned and each cp.async moves 8 bytes
 *    (issue_window<2>): half the copy instructions. The price: 6 of the 22 column groups
 *    conflict in shared memory where 5 did (the launcher's comment). Predicted: half of the 1.1
 *    us, about 4 us over the 8 rounds that copy. Measured in two calls, in a form with a tail copy
 *    for an odd window, which cannot occur (the window and the channel past an even c_lo are both
 *    even; ptxas spilled 44 bytes with it, 32 without): alone, 0.1258, 0.1261, 0.1259 ms against
 *    step 3's 0.1278, 0.1279, 0.1277; in the call that also timed step 5, 0.1269, 0.1273, 0.1273
 *    against 0.1283, 0.1290, 0.1290: 1.4 to 2.0 us. Its timeline: the first phase 0.93 us, and the
 *    conv 8.06 - 8.10 (the sixth conflicting group).
 * 5. y by a reduce-scatter. Defect: y took 1.76 us a round, each lane's 14 maxima of its 4 channels
 *    reduced over the group's 4 lanes by 28 shuffles in dependent pairs, and one lane in four
 *    storing. Change: lanes t and t ^ 1 each keep one of every pair of items and send the other,
 *    then lanes t and t ^ 2 the same: 11 shuffles, and every lane stores 3 or 4 of the 14 (the item
 *    a lane stores depends on t, so its position comes from the block's table, 4 LDS, not from the
 *    pos registers, which only a local-memory array could index). Predicted, if y's time were its
 *    shuffles': up to 1 us a round. Measured (the tail-copy form, the same call as step 4's
 *    figures): 0.1250, 0.1246, 0.1248 ms against step 4's 0.1269, 0.1273, 0.1273, 1.9 to 2.7 us.
 *    Both steps, three interleaved rounds of their recording call: 0.1223, 0.1223, 0.1224 ms
 *    against step 3's 0.1289, 0.1288, 0.1287, 6.5 us (5.0%), more than the 3.3 to 4.4 us they
 *    measured with the tail copy; ncu 148.7 us against 154.0, 47.1 million instructions against
 *    50.5; ptxas 32 bytes spilled (step 3: 48). Recorded then: 0.1219 ms. Tried (the README's
 *    list): the next window's copies issued in six parts, one at each pair of the conv's
 *    steps, so that no warp waits on them before the conv: the first phase fell to 0.13 us, but
 *    the conv rose to 9.95 us and the statistics to 1.98 (the copies and the gathers share the
 *    load pipe): 0.1392, 0.1393, 0.1389 ms against 0.1288, 0.1288, 0.1290.
 * 6. Most of the window by the TMA unit (Hopper's copy engine). Defect: even 8 bytes wide, the
 *    copies are 5859 cp.async a block and sample that every warp issues before its conv.
 *    Change, where D H W is a multiple of 4: channels 0 and 2 of the window, at offsets 0 and 2
 *    wstride (multiples of 4 floats, with the buffer's length win rounded up to a multiple of 4
 *    floats), by two bulk copies that thread 0 asks of the TMA unit; each buffer has its own
 *    mbarrier, on which both complete (issue_window_tma; hopper.cuh). Channel 1 (at 2 mod 4)
 *    and the two channels' last 0 or 2 floats by 8-byte cp.async as before: a third of the
 *    copy instructions. Predicted: the 0.93 us a round of step 4's timeline to
 *    about a third, 0.6 us less a round, about 5 us over the 8 rounds that copy. The first form
 *    initialised the barriers and issued the first copies from thread 0 without a block
 *    barrier between: racecheck reported the initialisation and first use as a hazard (4
 *    warnings); a __syncthreads after the initialisation removed them.
 * Measured, the final code (H100, medians of 50, three interleaved rounds of the recording call,
 * 2026-11-26): 0.1157, 0.1160, 0.1156 ms against step 5's 0.1209, 0.1210, 0.1208, 5.0 to 5.2
 * us (4.1 to 4.3%) less, as predicted (an earlier call: 0.1168, 0.1164, 0.1165 against 0.1221,
 * 0.1217, 0.1222); the sweep puts a round at 12.0 us. ncu (the kernel alone, same call): 142.3
 * us against 147.6, 44.7 million instructions against 47.1, issue slots 48.2% busy, 8.29
 * cycles between a warp's instructions. ptxas: 128 registers, nothing spilled. y's error in
 * make test: rel_l2 3.0e-7 at 1x3x16x32x32, 2.9e-7 at 2x3x4x35x37.
 * Recorded (the README's table, the recording call): 0.1164 ms [0.1161 - 0.1171]
 * [v16 model_fwd median_ms min_ms max_ms], 35.9 TFLOP/s [v16 model_fwd], 5.07x
 * [compile/v16 model_fwd] torch.compile's 0.590 ms [compile model_fwd]; the 0.10 ms target is
 * missed by 1.16x. (With v17 the merge moved into cluster.cuh's merge_triples, which both call:
 * ptxas reordered 20 of v16's 7828 SASS lines, registers and one move, and v16 timed the same,
 * 0.1168, 0.1175, 0.1173 ms against the recorded code's 0.1177, 0.1175, 0.1180 in three interleaved
 * rounds of one call, so its row then stood.) What is left: 9 rounds of 12.0 us for 8.53 samples a
 * cluster (the ninth about half full), and in each round the phases outside the conv, which nothing
 * overlaps: a timeline of the final form (an instrumented build, not committed, taken with v17's,
 * below: thread 0 of each block, medians over the rounds after each block's first, two runs) puts a
 * round at 12.2 us, 8.2 of conv, 0.45 from the round's start to the conv, 1.12 of statistics, 0.74
 * of exchange and 1.50 of y: 3.8 us outside the conv (5.1 in step 3's). The conv's time follows the
 * tensor cores' work: builds that compute wrong results on purpose, timed only (step 5's code,
 * one call), took 0.1114 - 0.1125 ms with two of the three products a tile and step, 0.1215 -
 * 0.1218 with all three, 0.1348 - 0.1355 with a fourth (a_lo b_lo); in another call, with one
 * of the three at half width (m64n8k8), 0.1179 - 0.1180 against 0.1211 - 0.1216: a product
 * costs about 10 us over the run (13.5 for the fourth), half to three-quarters of it in
 * proportion to its multiply-adds: merging two into one m64n32k8 would save about 3 to 4 us
 * (the README).
 *
 * v17: v16 without clusters: a team of plain blocks a sample, on every SM, the statistics
 * exchanged through L2
 *
 * Defect of v16: the blocks of a cluster must share a GPC (a graphics processing cluster, a
 * group of SMs), and the H100's 132 SMs are spread unevenly over its GPCs, some of which hold
 * fewer than 16: only 15 clusters of 8 such blocks fit at once (cudaOccupancyMaxActiveClusters).
 * 120 of its 132 SMs work, 12 stay idle the whole run, and the
 * 128 samples take 9 rounds for 8.53 samples a cluster, the ninth with 8 of the 15 clusters busy.
 * Change, in two steps, each measured. 1. The same kernel, launched without a cluster: 132 SMs hold
 * one block each, so 16 teams of 8 blocks (128 SMs), team j taking samples j, j + 16, ...: 8 rounds
 * of 16 samples. The cluster gave two things that must now come another way:
 *   - distributed shared memory for the exchange. The triples go through L2 instead: lane 0 of
 *     warp w stores its block's triple of channel w as three 8-byte words, each a float beside a
 *     tag (the sample's number plus a base that grows by the batch at every launch), and the
 *     team's blocks poll those words until all three carry the sample's tag. The data is its own
 *     flag, so the exchange is one store and one load, with no fence between data and flag and
 *     no counter (the form of NCCL's "LL", low-latency, protocol). This relies on the store and
 *     the load being gpu-scope .relaxed accesses of the same aligned 8 bytes: "morally strong",
 *     which the PTX memory model performs with single-copy atomicity (PTX ISA, "Memory
 *     Consistency Model"), so a word read with the right tag has the right value; and gpu-scope
 *     accesses are coherent across the SMs (in practice served by L2, not the SM's L1;
 *     team_publish, team_merge). Each team alternates between two sets of
 *     words, as v16's pushed triples alternate: a block writes sample n + 2's triples only after
 *     every team-mate has published n + 1, which each does after it has read n's (a block
 *     barrier ends its merge). Were that order broken, a poller would wait for a tag that never
 *     comes, not read a wrong value: each word names its sample.
 *   - the guarantee that a sample's blocks run at the same time, without which a block could
 *     poll for a team-mate that waits for its SM. The launch is cooperative
 *     (cudaLaunchAttributeCooperative), which fails rather than start a grid that cannot be
 *     resident all at once (CUDA C++ Programming Guide, "Grid Synchronization"): the grid is
 *     sized by the occupancy API.
 * Predicted: 8 rounds instead of 9, the sweep's 12.0 us a round less, 0.104 ms, if the exchange
 * through L2 costs what the push into shared memory costs (0.80 to 0.86 us a round in step 3's
 * timeline); each 0.1 us it costs more a round adds 0.8 us.
 * Measured (H100, medians of 50, three interleaved rounds a call):
 *   - the first form, each block's 48 words side by side and no nap between polls: 0.1165,
 *     0.1165, 0.1163 ms against v16's 0.1177, 0.1179, 0.1178, 1%. The rounds were the
 *     predicted ones (16 samples, one round: 0.0214 ms against v16's two, 0.0329), but each cost
 *     more: at 120 samples, 8 rounds for both, 0.1150 against v16's 0.1058.
 *   - the words of a channel side by side, so that a poll's three loads read 64 contiguous bytes
 *     each, not 8 words 384 bytes apart: 0.1148, 0.1140, 0.1140 against the first form's 0.1187,
 *     0.1178, 0.1183 (a second call). This form held to v16's 15 teams, 9 rounds as v16's
 *     (same call): 0.1268, 0.1253, 0.1259 against v16's 0.1182, 0.1168, 0.1172, (0.1260 -
 *     0.1174) / 9, about 1 us a round for the exchange through L2 over v16's push.
 *   - a nap (__nanosleep) before each poll, in three calls: 20 ns 0.1134, 0.1126, 0.1125
 *     (against no nap's 0.1148, 0.1140, 0.1140); 20, 60 and 150 ns 0.1126 - 0.1114, 0.1125 -
 *     0.1114 and 0.1099, 0.1099, 0.1086 (no nap 0.1142, 0.1145, 0.1132); 150, 400 and 1000 ns
 *     0.1077 - 0.1087, 0.1076 - 0.1082 and 0.1074 - 0.1076 (v16 0.1160 - 0.1163). Presumably
 *     2048 warps polling back to back load L2 enough to slow the other teams' copies and stores
 *     (not profiled). Past 150 ns the gain is under 0.3%, less than the spread between calls;
 *     150 ns kept, the shortest nap at that level.
 * Predicted against the recorded v16 (0.1164 [v16 model_fwd] - 0.0120 = 0.104 ms) or against v16 in
 * the recording call below (0.1178 - 0.0120 = 0.1058 ms).
 * Measured, this code (its recording call): 0.1105, 0.1104, 0.1100 ms against v16's 0.1178,
 * 0.1178, 0.1179, 6.2 to 6.7% less time, 4.5 us more than that call's 0.1058: about 0.6 us a round
 * more than v16's push over the 8 rounds, the exchange through L2 and its polls (the batch sweeps,
 * from different calls: 12.8 us a round, one round at 16 samples 0.0205 ms and 8 at 128 0.1098,
 * against v16's 12.0). ncu (the kernel alone, same call): 133.3 us against v16's 142.4. ptxas:
 * 128 registers, nothing spilled. y's error in make test: rel_l2 3.0e-7 at 1x3x16x32x32, 2.9e-7
 * at 2x3x4x35x37, 3.2e-7 at 140x3x4x35x37 (v16's: the same figures where both ran; v17 merges
 * the same triples with the same code).
 * A timeline (an instrumented build, not committed; thread 0 of each block writing %globaltimer
 * at the phase boundaries, medians over the rounds after each block's first, two runs, the same
 * call as v16's above): a round 12.7 us (v16: 12.2), of which 0.45 from its start to the conv,
 * 8.2 of conv, 1.12 of statistics, 0.99 of exchange (v16: 0.74; tenth to ninetieth percentile
 * 0.86 - 1.47 against 0.64 - 0.83) and 1.57 of y (v16: 1.50); the kernel's blocks span 102.3 -
 * 102.7 us from the first start to the last end (v16: 110.3 - 110.8). What is left for 0.10 ms,
 * 10 us, is 1.25 us a round: the conv is two-thirds of a round (8.2 of 12.7), and the 4.1 us
 * outside it (statistics, exchange, y) run with the tensor cores idle.
 * Recorded then: 0.1100 ms [0.1080 - 0.1155], 38.0 TFLOP/s (the old flush). Tried (the
 * README's list): polling only the last of the three words, then loading the other two: 0.1106 -
 * 0.1125 ms with a 150 ns nap, 0.1110 - 0.1120 with 400, 0.1088 - 0.1099 with 1000 (all three words
 * polled: 0.1077 - 0.1087, 0.1076 - 0.1082, 0.1074 - 0.1076, same call), presumably the second
 * load's round trip on the critical path; and polling first, napping only when a word is not there
 * yet: 0.1144, 0.1138, 0.1140 against the nap first's 0.1100, 0.1099, 0.1089 (a later call), not
 * explained; and one poller a block (warp 0 polling all 384 words, 12 a lane, into shared memory,
 * the other warps at a block barrier): 0.1237 - 0.1240 ms without a nap, 0.1262 - 0.1266 with 100
 * ns, against 0.1083 - 0.1093 (a third call).
 * 2. y with the multiply by m folded into the clamp (lane_max_folded). Defect: the timeline
 *    above gives y 1.57 us a round, and its 14 maxima of 4 channels a lane are 6 instructions a
 *    channel: an FMA, the clamp's two FMNMX, the multiply by m, and the first-on-ties maximum's
 *    compare and select. Change: m clamp(z, -1, 1) = clamp(m z, -|m|, |m|) for either sign of m,
 *    and m z = c (m k1) + m k0, so a channel is an FMA and two FMNMX, and the maximum an FMNMX
 *    (fmaxf: the same value as the first-on-ties select, since y is a value, not an index). SASS
 *    (nvcc 13.0): 98 FSETP, 98 FSEL and 48 FMUL fewer, 112 FMNMX more, 132 instructions fewer
 *    a thread and round; v15's and v16's kernels unchanged (lane_max stays theirs). Predicted:
 *    if y were issue-bound, 132 of its about 390 instructions a thread, up to a third of its
 *    1.57 us, 0.5 us a round, 4 us over the 8 rounds; less, since y's issue slots are not full
 *    (16 warps of 390 instructions on 4 schedulers are 0.85 us of issue at 1.83 GHz).
 *    Measured (H100, medians of 50, interleaved pairs in two calls): 0.1087 ms against step 1's
 *    0.1104, 0.1084 against 0.1099, then 0.1088 against 0.1099 and 0.1088 against 0.1094: 0.6 to
 *    1.7 us (0.5 to 1.5%) less in each clean pair; each call's third pair had one disturbed run
 *    (step 2's in the first call, median 0.1172 ms, maximum 0.19; step 1's in the second, 0.1177
 *    and 0.15), left out. ncu (the kernel alone): 125.8 us against step 1's 133.3 (another
 *    call). y's error in make test: rel_l2 3.0e-7 at 1x3x16x32x32, 2.9e-7 at 2x3x4x35x37 (step
 *    1: the same).
 * Recorded then (the README's table, the recording call of step 2): 0.1079 ms [0.1048 - 0.1129],
 * 38.8 TFLOP/s (the old flush); the 0.10 ms target was missed by 1.08x. The batch
 * sweep of that call: 0.0200 ms for one round (16 samples), 0.1074 for 8, 12.5 us a round. What
 * was left for 0.10 ms: 7.9 us, about 1 us a round, against a round that is two-thirds conv (step
 * 1's timeline) and a third statistics, exchange and y with the tensor cores idle.
 * 3. The conv's 81st column by FFMA. Defect: the GEMM's k is C_IN x 27 = 81 taps, 11 steps of 8
 *    columns, so the eleventh step is a whole step's wgmma work (7 tiles x 3 products) for one
 *    tap and 7 padding columns. Change: taps 0 to 79 in 10 steps (V17_KSTEPS), dealt over 20
 *    column groups; tap 80 (ci 2, kd kh kw 2 2 2) by FFMA in fp32 after the conv: a lane's 14
 *    corners, an LDS each (the 4 lanes of one g read the same word: a broadcast), times its 4
 *    channels' weights, 56 FFMA. The price: with no padding columns to fill them, 11 of the 20
 *    groups conflict in shared memory where 6 of 22 did. (At the KernelBench shape, with wstride
 *    2 mod 4, the 80 taps' offsets fall in classes of 27, 18, 26 and 9 mod 4, so every group
 *    without one of the 9 holds two taps of one class: 11 at least, which the round-robin
 *    dealing reaches; 62 wavefronts for a tile's 40 gathers against 56 for 44.) ptxas: 124
 *    registers, nothing spilled; v15's and v16's kernels unchanged.
 *    Predicted: one step of 11 is 0.75 us of the 8.2 us conv a round; the FFMA column is about
 *    76 instructions a thread, 0.17 us of issue for 16 warps on 4 schedulers at 1.83 GHz: 0.75 -
 *    0.17, about 0.6 us a round before the conflicts (11% more wavefronts for the gathers), say
 *    0.5 with them, 4 us over the 8 rounds.
 *    Measured (H100, medians of 50, three interleaved rounds a call, three calls): 0.1058,
 *    0.1061, 0.1057 ms against step 2's 0.1084, 0.1081, 0.1088; 0.1044, 0.1050, 0.1049 against
 *    0.1064, 0.1080, 0.1080; and in the recording call 0.1053, 0.1051, 0.1059 against 0.1081,
 *    0.1078, 0.1081: 2.0 to 3.1 us (1.9 to 2.9%) less, about 0.3 us a round, short of the
 *    prediction. ncu (the kernel alone, from two calls: step 2 in the second, step 3 in the
 *    recording call): 41.4 million instructions against 43.5, and 11.3 million shared-memory
 *    load wavefronts against 10.3, of which 2.9 million bank conflicts against 1.8 (1.15 million
 *    more, the 5 more conflicting groups' count); 125.1 us against 130.0 (step 2 took 125.8 in an
 *    earlier call, and the instruction count includes the exchange's polls, which vary
 *    with timing). What the conflicts cost: a build of the Tried list's barrier-free form (the
 *    README) that deals the columns as if wstride were 3 mod 4 (classes of 26, 18, 18 and 18: 6
 *    groups conflict, 52 wavefronts a tile; the window left as it is, so its results are wrong,
 *    timed only) took 0.1052, 0.1046, 0.1040 ms against that form's 0.1066, 0.1060, 0.1061, 1.4
 *    to 2.1 us, and step 3's 0.1058, 0.1061, 0.1057, 0.6 to 1.7 us (the first call): about the
 *    shortfall. A wstride that deals them so would put channel 1 at an odd
 *    offset (4-byte copies only) and channel 2 at 2 mod 4 (no bulk copy): it would undo part of
 *    steps 4 and 6 (2 and 5 us), so it was not tried. y's error in make test: rel_l2 3.0e-7 at
 *    1x3x16x32x32, 3.1e-7 at 2x3x4x35x37 and at 140x3x4x35x37 (step 2: 3.0e-7 and 2.9e-7 at the
 *    first two; step 1: 3.2e-7 at 140x3x4x35x37).
 * Recorded (the README's table, the recording call of step 3): 0.1026 ms [0.1010 - 0.1059]
 * [v17 model_fwd median_ms min_ms max_ms], 40.7 TFLOP/s [v17 model_fwd], 5.74x
 * [compile/v17 model_fwd] torch.compile's 0.590 ms [compile model_fwd]; the 0.10 ms target is
 * missed by 1.03x. The batch sweep of that call: 0.0199 ms for one round, 0.1052 for 8, 12.2 us a
 * round (the recorded sweep: 0.0196 ms [v17 model_fwd @16] for one). What is left for 0.10 ms: 2.6
 * us, about 0.3 us a round.
 *
 * v18: v17 in half blocks: two teams an SM, one half's conv beside the other's statistics,
 * exchange and y
 *
 * Defect of v17: in each round the block's 16 warps finish the conv together, then compute the
 * statistics, exchange them and write y together, 4 us of 12 (step 1's timeline) in which the
 * SM's tensor cores idle; no other block on the SM has work for them (one block an SM: 512
 * threads x 128 registers).
 * Change: the block's two halves of 8 warps (256 threads, two warpgroups) are members of two
 * teams. A warp keeps its 7 tiles, so a half's span is 896 corners (TS = 128 between a warp's
 * tiles) and a sample takes 16 halves: block row j's half 0 is a member of team 2 j, its half 1
 * of team 2 j + 1, 16 teams on 128 SMs, 8 rounds as v17's. Each half has its own two window
 * buffers (four in all, 148 KB of shared memory at the KernelBench shape), mbarriers, partials,
 * statistics and block barrier (bar.sync 1 + half over its 256 threads, named_sync, in place of
 * __syncthreads); B, the columns and the corners' table are the block's (both halves have the
 * same rank, so the same span). A warp reduces two channels of its half's statistics; a team's
 * words hold up to 16 members' triples (team_publish<16>, team_merge16, lane r of a half-warp
 * polling member r). Half 1 starts its first conv when half 0 has finished its own (half 0
 * arrives at named barrier 3, half 1 waits there): from then on the halves are half a round
 * apart, each one's statistics, exchange and y beside the other one's conv.
 * Predicted, from a measurement: builds of v17 that leave warpgroups out of the conv (wrong
 * results, timed only; H100, medians of 50, three interleaved rounds) took 0.1041 - 0.1050 ms
 * with all 4 warpgroups in the conv, 0.0941 - 0.0947 with 3, 0.0832 - 0.0834 with 2 and 0.0430 -
 * 0.0434 with none. With the middle rounds' 0.1044, 0.0833 and 0.0433 over 8 rounds, the conv is
 * 7.6 us a round, and 5.0 us with 2 warpgroups doing half of it, so 8 warps alone run the conv at
 * 76% of the 16 warps' rate; the rest of a round takes 4.3 us (the sweep at 16 and 128 samples
 * without the conv: 0.0128, 0.0430 ms). If the halves run in antiphase, half A's conv, 3.8 us of
 * work at the 16 warps' rate, goes at 0.76 of that rate while B is outside its conv (4.3 us) and
 * at half of it while both convs run: 0.76 x 4.3 + 0.5 (P - 2 x 4.3) = 3.8 gives a period P of
 * 9.7 us for each half's sample against v17's 12.2 us a round: 0.1026 [v17 model_fwd] x 9.7 / 12.2,
 * about 0.082 ms.
 * Measured (H100, medians of 50, three interleaved rounds a call): 0.1002, 0.1001, 0.1001 ms
 * against v17's 0.1065, 0.1066, 0.1066 (its code in this commit, below); in the recording call
 * 0.0995, 0.0996, 0.0997 against 0.1056, 0.1053, 0.1061; 5.4 to 6.1% less in each pair, far from
 * the prediction (v18 in two more calls, beside the forms below: 0.1003, 0.1003, 0.1000; 0.1000,
 * 0.0994, 0.0990, 0.0994). The batch sweep: 0.0221 ms [v18 model_fwd @16] for one round (16
 * samples; v17 0.0196 [v17 model_fwd @16]: half 1 waits for half 0's conv), 11.0 us a round after
 * (0.0988 ms at 128 samples in the sweep). At batch 2 to 8 v18 is also the slower (0.0201 - 0.0207
 * ms against 0.0177 - 0.0184), at batch 1 the faster (0.0136 [v18 model_fwd @1] against 0.0180
 * [v17 model_fwd @1]; not analysed). ncu (the kernel alone, the recording
 * call): 117.9 us (v17: 125.1, another call), 42.7 million instructions, the tensor pipe 32.1%
 * busy, 7.85 cycles between a warp's instructions.
 * A timeline (an instrumented build, not committed: thread 0 of each half writing %globaltimer at
 * its phase boundaries, a barrier added at the end of each round; medians over the rounds after
 * the first, two runs): a round 10.9 - 11.0 us; half 0's first conv, alone on the SM, 4.5 us (86%
 * of the 16 warps' rate), the later ones 5.5 - 5.7 us; the two halves' convs overlap for a fifth
 * of their time (medians 18% and 23% of half 0's conv time), half 1's starting 6.4 - 6.7 us after
 * half 0's: the halves run about half a round apart, and the offset holds. Two things missed the
 * prediction. The conv slows beside the other half's statistics, exchange and y, though it
 * rarely shares the tensor cores with the other conv (4.5 us alone, 5.5 - 5.7 beside them). And
 * outside its conv a half takes 4.9 - 5.2 us where v17's block took 4.1 in the same four phases
 * (step 1's timeline: 0.45, 1.12, 0.99 and 1.57): 0.6 - 0.7 from the round's start to the conv
 * (issuing the next window's copies: 5.9 cp.async a thread where v17 has 3.8, the same 2114
 * corners of halo around 896 corners instead of 1792), 1.2 - 1.5 of statistics, 1.5 - 1.7 of
 * exchange (presumably waiting for the slowest of 16 members instead of 8) and 1.3 - 1.5 of y
 * with the added barrier. So a round is a half's slowed conv plus the rest, 5.5 - 5.7 + 4.9 -
 * 5.2 us. Other forms measured beside (three interleaved rounds of one call; this form 0.1003,
 * 0.1003, 0.1000): both halves starting together, 0.1086, 0.1090, 0.1093 (their convs then
 * presumably stay in step); half 1 starting after half 0's first exchange, 0.1116, 0.1118,
 * 0.1116; team_poll's nap at 50 and 400 ns, 0.1009 - 0.1010 and 0.0999 - 0.1003 (150 kept,
 * v17's); and in a later call, the next window's copies issued after the half publishes its
 * triples, in its wait for the team's, 0.1042, 0.1029, 0.1029, 0.1031 against 0.1000, 0.0994,
 * 0.0990, 0.0994. ptxas: 128 registers, 24 bytes spilled (7 loads a round, after the conv's
 * last wgmma), 16 barriers (the named ones' ids are registers).
 * Recorded (the README's table, the recording call): 0.0981 ms [0.0964 - 0.1013]
 * [v18 model_fwd median_ms min_ms max_ms], 42.6 TFLOP/s [v18 model_fwd], 6.01x
 * [compile/v18 model_fwd] torch.compile's 0.590 ms [compile model_fwd]: the 0.10 ms target met,
 * 1.9% under it, narrowly (the slowest repetition 0.1013 ms [v18 model_fwd max_ms]; with the old
 * flush 0.6% under it in its recording call, 0.0990 - 0.1000 in a later one and 0.1000 - 0.1003
 * in two earlier ones). v16's and v17's kernels changed with it only in integer instructions (the
 * address arithmetic of the shared team_poll, merge_sums and the member's thread index; SASS, nvcc
 * 13.0).
 * Timed against their committed code in interleaved pairs: v17 0.1065, 0.1066, 0.1066 ms against
 * 0.1061, 0.1060, 0.1065 (the first call) and 0.1056, 0.1053, 0.1061 against 0.1044, 0.1049,
 * 0.1054 (the recording call): slower in all six pairs, by 0.1 to 1.2 us, 0.5% on average, about
 * the spread between rounds of one binary (1.0 us in the recording call); v16 0.1178, 0.1177,
 * 0.1161 against 0.1175, 0.1178 and a disturbed 0.1269. Their rows were then kept, recorded with
 * the code before; the table's rows, re-recorded since (data commit 29662c6), are this code's.
 */
#include <cuda_pipeline.h>
#include <string.h>

#include "cluster.cuh"
#include "conv.cuh"
#include "model.h"
#include "tf32.cuh"

#define V15_KSTEPS ((C_IN * KVOL + 7) / 8) /* steps of 8 over the GEMM's k (81 taps): 11 */
#define V15_K (8 * V15_KSTEPS)             /* k padded to whole steps: 88 */
#define V15_GROUPS (V15_K / 4)             /* groups of 4 columns that one LDS reads: 22 */
#define V17_KSTEPS (C_IN * KVOL / 8) /* v17 (step 3): whole steps only, 10; tap 80 by FFMA */
#define V18_WARPS 8 /* v18: the warps of a half block, a member of its team */
#define V18_RANKS 16 /* v18: the most members a team */
#define V15_TILES 7 /* 16-corner tiles a warp holds in registers */
#define V15_SPAN (16 * 16 * V15_TILES) /* corners a block: 16 warps x V15_TILES tiles x 16 */

/* a buffer of the window, floats: its C_IN channels wstride apart, rounded up to a multiple of 4
 * for v16 (WGMMA), whose bulk copies need 16-byte aligned destinations (step 6) */
__host__ __device__ static inline unsigned v15_buffer(unsigned wstride, bool wgmma)
{
    return wgmma ? (C_IN * wstride + 3) & ~3u : C_IN * wstride;
}

/* The GEMM's columns for one shape, computed on the host (v15_columns): column k reads x at
 * off[k] floats from a corner in the block's window (a tap's offset in x plus its channel's
 * place in the window), with the weights of tap[k] (PyTorch's ci * 27 + kd * 9 + kh * 3 + kw;
 * -1: a padding column, weight 0) */
struct v15_cols {
    unsigned off[V15_K];
    signed char tap[V15_K];
};

/* B, split once by each block, the offsets of each step's columns, and the reductions'
 * partials. B's layout is the one wgmma reads (v16; PTX ISA, "Shared Memory Matrix Layout",
 * K-major, no swizzle): step st's 8 x 16 tile is four "core matrices" of 8 channels x 4 columns,
 * 128 contiguous bytes each (channel co's 4 columns in one 16-byte row), those of columns 4 .. 7
 * 128 bytes after those of 0 .. 3 (the descriptor's leading byte offset) and those of channels
 * 8 .. 15 256 bytes after 0 .. 7 (its stride byte offset): word 64 (co / 8) + 32 (k / 4) +
 * 4 (co % 8) + k % 4 of the step. v15's mma.sync lane (g, t) finds its b0 (column t, channel
 * g) at word 4 g + t = lane, b1 (column t + 4) at 32 + lane, and channel 8 + g's 64 words on:
 * four conflict-free LDS a step for b_hi and four for b_lo. */
struct v15_smem {
    uint32_t b_hi[V15_KSTEPS][128];
    uint32_t b_lo[V15_KSTEPS][128]; /* their 3xTF32 remainders */
    uint2 off[V15_KSTEPS][4];       /* step s, t: the offsets of columns 8 s + t and 8 s + t + 4 */
    float b[C_OUT];
    float part[16][C_OUT]; /* warp w's sum for channel co */
    int count[16];         /* warp w's corners that are positions */
    float bmean[C_OUT];    /* the block's mean of channel co */
};

/* the column order: groups of four columns (k = 4 j .. 4 j + 3) are read by one LDS each, lane
 * (g, t) at corner + 4 g + off[4 j + t], so the 32 words fall in 32 banks when the four offsets
 * differ mod 4. The taps are sorted by offset mod 4 and dealt round-robin over the 2 x ksteps
 * groups (v15, v16: 22; v17: 20): a residue class of at most that many taps never lands twice
 * in one group (the KernelBench shape's classes of 27 do: v15's and v17's comments). A padding
 * column reads the same word as its group's first column (a broadcast, no conflict). v17 (ksteps
 * 10): taps 0 .. 79 in the steps, tap 80 at k = 80, for the FFMA column (its step 3). */
static void v15_columns(const shape *sh, unsigned wstride, int ksteps, v15_cols *c)
{
    int hw = sh->h * sh->w, next = 0, groups = 2 * ksteps, taps = min(C_IN * KVOL, 8 * ksteps);
    unsigned off[C_IN * KVOL];
    for (int j = 0; j < C_IN * KVOL; j++) {
        int ci = j / KVOL, r = j % KVOL;
        off[j] = ci * wstride + (r / 9) * hw + (r / 3 % 3) * sh->w + r % 3;
    }
    for (int res = 0; res < 4; res++)
        for (int j = 0; j < taps; j++)
            if ((off[j] & 3) == (unsigned)res) {
                int k = 4 * (next % groups) + next / groups;
                c->off[k] = off[j], c->tap[k] = (signed char)j;
                next++;
            }
    for (; next < 8 * ksteps; next++) {
        int k = 4 * (next % groups) + next / groups;
        c->off[k] = c->off[k & ~3], c->tap[k] = -1;
    }
    for (int j = taps; j < C_IN * KVOL; j++) /* v17: the taps past the steps, after them */
        c->off[j] = off[j], c->tap[j] = (signed char)j;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900 /* the kernel's helpers: Hopper, as it is */
/* a lane's sums over its corners that are positions, per channel (s[h][e]: channel 8 h + 2 t +
 * e): of the values (SQUARES false), or of their squared distances from cm (true) */
template <bool SQUARES>
__device__ static inline void lane_sums(const float acc[V15_TILES][2][4],
                                        const int pos[V15_TILES][2], const float cm[2][2],
                                        float s[2][2])
{
    s[0][0] = s[0][1] = s[1][0] = s[1][1] = 0.0f;
#pragma unroll
    for (int r = 0; r < V15_TILES; r++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (pos[r][e >> 1] >= 0) {
                    float d = acc[r][h][e] - cm[h][e & 1];
                    s[h][e & 1] += SQUARES ? d * d : acc[r][h][e];
                }
}

/* y's candidates at a lane's corner hh (row g or g + 8) of a tile: u = m clamp(c (m rstd) -
 * mean rstd) for its four channels (c = acc[h][2 hh + e]: channel 8 h + 2 t + e), and their
 * maximum, the first on ties */
__device__ static inline float lane_max(const float acc[2][4], int hh, const float k1[2][2],
                                        const float k0[2][2], const float mult[2][2])
{
    float best = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float u = clampf1(fmaf(acc[h][2 * hh + e], k1[h][e], k0[h][e])) * mult[h][e];
            best = (h == 0 && e == 0) || u > best ? u : best;
        }
    return best;
}

/* v17 (step 2): the same maxima, up to rounding, with the multiply by m folded into the clamp. m
 * clamp(z, -1, 1) = clamp(m z, -|m|, |m|) for either sign of m, and m z = c (m k1) + m k0, so u is
 * an FMA and two FMNMX: a1 = m k1, a0 = m k0, lim = |m|; the maximum over the channels is fmaxf,
 * which gives the same value as the first-on-ties select (a NaN is dropped, where clampf1 keeps it:
 * finite x has none) */
__device__ static inline float lane_max_folded(const float acc[2][4], int hh, const float a1[2][2],
                                               const float a0[2][2], const float lim[2][2])
{
    float best = -INFINITY;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            best = fmaxf(best, fminf(fmaxf(fmaf(acc[h][2 * hh + e], a1[h][e], a0[h][e]),
                                           -lim[h][e]),
                                     lim[h][e]));
    return best;
}

/* a lane's sums of its four channels (s[h][e]: channel 8 h + 2 t + e) added over the warp's 8
 * lanes of its t (lanes 4, 8, 16 apart), and the warp's 16 sums into part[warp] */
__device__ static inline void warp_part(float (*part)[C_OUT], int warp, float s[2][2])
{
    int lane = threadIdx.x & 31, t = lane & 3;
#pragma unroll
    for (int o = 4; o < 32; o <<= 1)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                s[h][e] += __shfl_xor_sync(FULL, s[h][e], o);
    if (lane < 4)
#pragma unroll
        for (int h = 0; h < 2; h++)
            part[warp][8 * h + 2 * t] = s[h][0], part[warp][8 * h + 2 * t + 1] = s[h][1];
}

/* sample n's window of x for the block whose span starts at corner c_lo, into dst (channel ci
 * at dst + ci * wstride): its first `in` floats a channel, by cp.async of V floats each,
 * committed as one group. v15: V = 1 (wstride is 1 mod 4, so wider copies would be
 * misaligned). v16 (step 4): wstride 2 mod 4, and V = 2 where D H W is even: every channel's
 * source and destination then start 8-byte aligned, and `in` is even (the window's length is,
 * and so is the rest of the channel past an even c_lo). The rest of the window, past the end of x's
 * channel, is the same zeros for every sample: the kernel writes them once into each buffer,
 * and only corners that are not positions read them. */
template <int V, int NT = CL_THREADS>
__device__ static inline void issue_window(float *dst, const float *__restrict__ x, int n, int c_lo,
                                           int in, int dhw, unsigned wstride, unsigned tid)
{
    const float *src = x + ((size_t)n * C_IN * dhw + c_lo);
    for (int ci = 0; ci < C_IN; ci++, src += dhw, dst += wstride) {
        const float *s = src + V * tid, *end = src + in;
        for (float *d = dst + V * tid; s < end; s += V * NT, d += V * NT)
            __pipeline_memcpy_async(d, s, 4 * V);
    }
    __pipeline_commit();
}

#if __CUDA_ARCH__ >= 900
/* v16 (step 6) where D H W is a multiple of 4: channels 0 and 2 of the window (offsets 0 and
 * 2 wstride, both multiples of 4 floats, as is the buffer's stride win) by two bulk copies that
 * thread 0 asks of the TMA unit, completing on bar, their first `in` rounded down to 4 floats;
 * channel 1 (offset 2 mod 4) and the other two's last 0 or 2 floats by 8-byte cp.async,
 * committed as one group. Both are waited for: the group, and bar's phase. */
template <int NT = CL_THREADS>
__device__ static inline void issue_window_tma(float *dst, const float *__restrict__ x, int n,
                                               int c_lo, int in, int dhw, unsigned wstride,
                                               unsigned long long *bar, unsigned tid)
{
    const float *src = x + ((size_t)n * C_IN * dhw + c_lo);
    int body = in & ~3;
    if (tid == 0) {
        fence_proxy_async(); /* after the threads' last reads of this buffer (a barrier before) */
        mbar_expect_tx(bar, 2u * 4u * body);
        if (body) {
            bulk_copy(dst, src, 4u * body, bar);
            bulk_copy(dst + 2 * wstride, src + 2 * (size_t)dhw, 4u * body, bar);
        }
    }
    for (int j = 2 * tid; j < in; j += 2 * NT)
        __pipeline_memcpy_async(dst + wstride + j, src + dhw + j, 8);
    if (tid == 32 && body < in) {
        __pipeline_memcpy_async(dst + body, src + body, 8);
        __pipeline_memcpy_async(dst + 2 * wstride + body, src + 2 * (size_t)dhw + body, 8);
    }
    __pipeline_commit();
}
#endif

/* v15's conv: step st (8 columns) over the warp's 7 tiles, each tile's A gathered (4 LDS) and
 * split, then 6 mma.sync (2 channel halves x 3 products); the next step's offsets read early */
__device__ static inline void conv_mma_sync(float acc[V15_TILES][2][4], const v15_smem &sw,
                                            const float *xb, int lane)
{
    int t = lane & 3;
    uint2 o_next = sw.off[0][t];
#pragma unroll 1
    for (int st = 0; st < V15_KSTEPS; st++) {
        uint2 o = o_next;
        o_next = sw.off[st + 1 < V15_KSTEPS ? st + 1 : st][t];
        uint32_t b_hi[2][2] = {{sw.b_hi[st][lane], sw.b_hi[st][32 + lane]},
                               {sw.b_hi[st][64 + lane], sw.b_hi[st][96 + lane]}};
        uint32_t b_lo[2][2] = {{sw.b_lo[st][lane], sw.b_lo[st][32 + lane]},
                               {sw.b_lo[st][64 + lane], sw.b_lo[st][96 + lane]}};
        const float *px = xb + o.x, *py = xb + o.y;
#pragma unroll
        for (int r = 0; r < V15_TILES; r++) {
            float a[4] = {px[256 * r], px[256 * r + 32], py[256 * r], py[256 * r + 32]};
            uint32_t a_hi[4], a_lo[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                split_fast(a[e], &a_hi[e], &a_lo[e]);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mma_tf32(acc[r][h], a_lo, b_hi[h]);
                mma_tf32(acc[r][h], a_hi, b_lo[h]);
                mma_tf32(acc[r][h], a_hi, b_hi[h]);
            }
        }
    }
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) /* v16's helpers: sm_90a code only */
/* the descriptor of a B tile in shared memory (PTX ISA, "Matrix Descriptor Format"): the
 * address, the leading byte offset (128: columns 4 .. 7's core matrices after 0 .. 3's) and the
 * stride byte offset (256: channels 8 .. 15's after 0 .. 7's), in 16-byte units; no swizzle */
__device__ static inline uint64_t wgmma_desc(const void *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3ffffu) >> 4) | (uint64_t)(128 >> 4) << 16 |
           (uint64_t)(256 >> 4) << 32;
}

/* d (the warpgroup's 64 x 16) += a (64 x 8, registers) b (8 x 16, shared memory, desc) in TF32,
 * with fp32 accumulation (PTX ISA, "wgmma.mma_async"). Each warp of the warpgroup holds 16 of
 * the 64 rows, in mma.sync's layouts: a as m16n8k8's A fragment, d as two m16n8 accumulators
 * side by side (d[4 h + e]: channels 8 h .. 8 h + 7). Asynchronous: the tensor cores read a and
 * write d after the instruction issues, until a wgmma_wait says its group is done. */
__device__ static inline void wgmma_tf32(float d[8], const uint32_t a[4], uint64_t desc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

/* wgmma.fence: the registers written before it (here A's hi and lo, named so that the compiler
 * computes them first) are what the following wgmma reads */
__device__ static inline void wgmma_fence(uint32_t hi[4], uint32_t lo[4])
{
    asm volatile("wgmma.fence.sync.aligned;"
                 : "+r"(hi[0]), "+r"(hi[1]), "+r"(hi[2]), "+r"(hi[3]), "+r"(lo[0]), "+r"(lo[1]),
                   "+r"(lo[2]), "+r"(lo[3]));
}

/* the wgmmas issued since the last commit form a group; wait until at most N groups are pending */
__device__ static inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;"); }
template <int N> __device__ static inline void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N));
}

/* keeps the compiler from moving a definition or use of v across this point (asm volatile
 * statements keep their order) */
__device__ static inline void pin(float &v) { asm volatile("" : "+f"(v)); }

/* v16's step st over the warp's 7 tiles: each tile's A gathered as in v15 and split by
 * truncation (step 3), then its three products on the warpgroup's tensor cores, one group a
 * tile. A's registers alternate between two buffers, tile r using (r + P) & 1 (P: the step's
 * parity, so that consecutive tiles, across steps too, use different ones); before a buffer is
 * rewritten, the group that read it two tiles back must be done: wait_group 1 (all but the
 * newest). */
template <int P, int TS>
__device__ static inline void wgmma_step(float acc[V15_TILES][2][4], uint32_t a_hi[2][4],
                                         uint32_t a_lo[2][4], const v15_smem &sw,
                                         const float *xb, int st, int t, uint64_t dhi,
                                         uint64_t dlo)
{
    uint2 o = sw.off[st][t];
    const float *px = xb + o.x, *py = xb + o.y;
    dhi += 32 * st, dlo += 32 * st; /* the step's B: 512 bytes on, 32 in 16-byte units */
#pragma unroll
    for (int r = 0; r < V15_TILES; r++) {
        const int b = (r + P) & 1;
        float a[4] = {px[TS * r], px[TS * r + 32], py[TS * r], py[TS * r + 32]};
        wgmma_wait<1>();
#pragma unroll
        for (int e = 0; e < 4; e++)
            split_trunc(a[e], &a_hi[b][e], &a_lo[b][e]);
        wgmma_fence(a_hi[b], a_lo[b]);
        wgmma_tf32(&acc[r][0][0], a_lo[b], dhi);
        wgmma_tf32(&acc[r][0][0], a_hi[b], dlo);
        wgmma_tf32(&acc[r][0][0], a_hi[b], dhi);
        wgmma_commit();
    }
}

/* v16's conv: the steps two at a time (the buffers' parity), then a wait for the last group.
 * The accumulators are pinned on both sides: the bias written before the first wgmma, and no
 * use moved above the final wait. */
template <int NST, int TS = 256>
__device__ static inline void conv_wgmma(float acc[V15_TILES][2][4], const v15_smem &sw,
                                         const float *xb, int t)
{
    uint64_t dhi = wgmma_desc(sw.b_hi[0]), dlo = wgmma_desc(sw.b_lo[0]);
    uint32_t a_hi[2][4], a_lo[2][4];
#pragma unroll
    for (int r = 0; r < V15_TILES; r++)
#pragma unroll
        for (int e = 0; e < 8; e++)
            pin((&acc[r][0][0])[e]);
#pragma unroll 1
    for (int st = 0; st < NST; st += 2) {
        wgmma_step<0, TS>(acc, a_hi, a_lo, sw, xb, st, t, dhi, dlo);
        if (st + 1 < NST)
            wgmma_step<1, TS>(acc, a_hi, a_lo, sw, xb, st + 1, t, dhi, dlo);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < V15_TILES; r++)
#pragma unroll
        for (int e = 0; e < 8; e++)
            pin((&acc[r][0][0])[e]);
}
#endif

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
/* v17's exchange through L2 (the comment at the top). A word: a float in its low half, its tag
 * in the high half, stored and loaded at gpu scope (PTX ISA, "st" and "ld", .relaxed.gpu: the
 * access is coherent across the SMs, in practice served by L2, not the SM's own L1). rec: a
 * team's words for one parity, 3 x CL x C_OUT of them (TEAM_WORD). */
__device__ static inline void st_tagged(unsigned long long *p, float v, unsigned tag)
{
    unsigned long long w = (unsigned long long)tag << 32 | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

__device__ static inline unsigned long long ld_tagged(const unsigned long long *p)
{
    unsigned long long w;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
    return w;
}

/* word k of block r's triple of channel co: word k of a channel's CL blocks side by side, so
 * that each of the polling warp's three loads reads 64 contiguous bytes (a first form, block r's
 * 48 words side by side, read 8 words 384 bytes apart at each load: 0.1178 - 0.1187 ms against
 * 0.1140 - 0.1148 for this layout, both without team_merge's nap; H100, three interleaved rounds
 * of one call) */
#define TEAM_WORD_R(co, r, k, R) ((3 * (co) + (k)) * (R) + (r)) /* R: CL (v17), 16 (v18) */

/* block `rank`'s triple of channel co (count, mean, M2), in a team of at most R blocks (v17:
 * lane 0 of warp co; v18: lanes 0 and 8 of warp co / 2 of a half) */
template <int R = CL>
__device__ static inline void team_publish(unsigned long long *rec, int rank, int co, float4 v,
                                           unsigned tag)
{
    st_tagged(rec + TEAM_WORD_R(co, rank, 0, R), v.x, tag);
    st_tagged(rec + TEAM_WORD_R(co, rank, 1, R), v.y, tag);
    st_tagged(rec + TEAM_WORD_R(co, rank, 2, R), v.z, tag);
}

/* block r's triple of channel co, polled until its three words carry the tag; the warp until
 * every lane has its own (lanes with `have` set poll nothing) */
__device__ static inline float4 team_poll(const unsigned long long *rec, int word0, int stride,
                                          unsigned tag, bool have)
{
    float4 w = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    while (!__all_sync(FULL, have))
        if (!have) {
            __nanosleep(150);
            unsigned long long a = ld_tagged(rec + word0), b = ld_tagged(rec + word0 + stride),
                               c = ld_tagged(rec + word0 + 2 * stride);
            have = (unsigned)(a >> 32) == tag && (unsigned)(b >> 32) == tag &&
                   (unsigned)(c >> 32) == tag;
            w = make_float4(__uint_as_float((unsigned)a), __uint_as_float((unsigned)b),
                            __uint_as_float((unsigned)c), 0.0f);
        }
    return w;
}

/* every thread of the block: lane r of warp w polls block r's three words of channel w until
 * all carry the tag, the warp until all its lanes < ncl have theirs; then v16's merge. Before
 * each poll a nap (__nanosleep, about 150 ns): without it the run is 4% slower, presumably 2048
 * warps polling back to back loading L2 (naps of 0, 20, 60, 150, 400 and 1000 ns, and polling
 * before the nap, measured in the text at the top). */
__device__ static inline void team_merge(cluster_shared *cs, const unsigned long long *rec,
                                         unsigned tag, int S, int ncl)
{
    int lane = threadIdx.x & 31, co = threadIdx.x >> 5;
    merge_triples(cs, team_poll(rec, TEAM_WORD_R(co, lane, 0, CL), CL, tag, lane >= ncl), S);
}

/* v18: warp w of a half merges channels 2 w (lanes 0 .. 15, lane r polling block r) and
 * 2 w + 1 (lanes 16 .. 31) of a team of up to 16 blocks into C's mean and rstd; the caller's
 * half then meets at its barrier */
__device__ static inline void team_merge16(cluster_shared *C, const unsigned long long *rec,
                                           int warp, unsigned tag, int S, int ncl)
{
    int lane = threadIdx.x & 31, co = 2 * warp + (lane >> 4), r = lane & 15;
    float mean, m2;
    merge_sums<16>(team_poll(rec, TEAM_WORD_R(co, r, 0, 16), 16, tag, r >= ncl), &mean, &m2);
    if (r == 0)
        C->mean[co] = mean, C->rstd[co] = rsqrtf(m2 / S + (float)IN_EPS);
}
#endif

/* v18: a named barrier (PTX ISA, "bar.sync"): the `count` threads that reach barrier `id` wait
 * for one another; bar.arrive counts a thread in without waiting. Ids 1 and 2: each half's own
 * barrier, 256 threads; id 3: the halves' one meeting at the start (512). __syncthreads is id 0. */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ static inline void named_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ static inline void named_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/* the barrier of a team's member: the block's (__syncthreads), or v18's half's (id 1 + hx) */
template <bool HALVES> __device__ static inline void member_sync(int hx)
{
    if (HALVES)
        named_sync(1 + hx, 32 * V18_WARPS);
    else
        __syncthreads();
}
#endif

/* v15 (WGMMA false), v16 (true), v17 (WGMMA and TEAM) and v18 (the three and HALVES). v16's to
 * v18's bodies exist only in sm_90a code; the harness runs them nowhere else (NEEDS_SM90A). v17:
 * xch, the teams' words (2 parities x CL blocks x C_OUT channels x 3 a team; v18: 16 members),
 * tag0, the launch's base tag. */
template <bool WGMMA, bool TEAM = false, bool HALVES = false>
__global__ void __launch_bounds__(CL_THREADS, 1)
k_register_conv(const float *__restrict__ x, const float *__restrict__ weight,
                const float *__restrict__ bias, const float *__restrict__ m,
                float *__restrict__ y, float *__restrict__ mean, float *__restrict__ rstd,
                const shape sh, const __grid_constant__ v15_cols cols, unsigned wstride,
                unsigned long long *__restrict__ xch, unsigned tag0)
{
#if __CUDA_ARCH__ >= 900
#ifndef __CUDA_ARCH_FEAT_SM90_ALL
    if (WGMMA)
        return;
#endif
    extern __shared__ __align__(16) float xs[]; /* two windows of x, then ptab (v16: bulk copies) */
    __shared__ cluster_shared cs;
    __shared__ __align__(128) v15_smem sw;
    /* v18: the second half's statistics, and both halves' partials, counts and means */
    __shared__ cluster_shared cs1[1];
    __shared__ float part18[HALVES ? 2 : 1][V18_WARPS][C_OUT];
    __shared__ int count18[HALVES ? 2 : 1][V18_WARPS];
    __shared__ float bmean18[HALVES ? 2 : 1][C_OUT];
    /* v16's pushed triples, by parity and rank */
    __shared__ __align__(16) float4 pushed[WGMMA && !TEAM ? 2 * CL * C_OUT : 1];
    __shared__ unsigned long long pushed_bar[2];
    __shared__ unsigned long long win_bar[HALVES ? 4 : 2]; /* v16's bulk copies, one a buffer */
    __shared__ float wcol[TEAM ? C_OUT : 1];  /* v17 (step 3): tap 80's weights */
    constexpr int NST = TEAM ? V17_KSTEPS : V15_KSTEPS; /* the conv's steps of 8 columns */
    /* v18: a member of a team is half the block, NW warps; its tiles TS corners apart */
    constexpr int NW = HALVES ? V18_WARPS : 16, NT = 32 * NW, TS = 16 * NW;
    cg::cluster_group cluster = cg::this_cluster();
    const int span = TS * V15_TILES;
    const int hx = HALVES ? (int)threadIdx.x / NT : 0; /* v18: the half */
    const unsigned tid = HALVES ? threadIdx.x % NT : threadIdx.x;
    cluster_shared &C = HALVES && hx ? cs1[0] : cs;
    int *count = HALVES ? count18[hx] : sw.count; /* the member's count of positions a warp */
    int rank = TEAM ? (int)blockIdx.x : (int)cluster.block_rank();
    int ncl = TEAM ? (int)gridDim.x : (int)cluster.num_blocks();
    int warp = tid >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int hw = sh.h * sh.w, dhw = sh.d * hw, c_lo = rank * span;
    int win = (int)v15_buffer(wstride, WGMMA);
    const bool tma = WGMMA && (dhw & 3) == 0; /* v16's window by bulk copies (step 6) */
    int len = span + 2 * hw + 2 * sh.w + 2; /* the window: the span's corners and their taps */
    int in = min(len, dhw - c_lo);          /* of which inside x's channel */
    float *xh = xs + 2 * hx * win;          /* the member's two buffers */
    unsigned long long *wbar = win_bar + 2 * hx;
    int *ptab = (int *)(xs + (HALVES ? 4 : 2) * win); /* corner i of the span: its position in y,
                                                       * or -1 (v18: both halves' span) */
    /* v18: team 2 blockIdx.y + hx, of 2 gridDim.y, takes samples team, team + teams, ... */
    const int team = HALVES ? 2 * (int)blockIdx.y + hx : (int)blockIdx.y;
    const int teams = HALVES ? 2 * (int)gridDim.y : (int)gridDim.y;

    /* 1. the first sample's window; while it lands, the zeros past x's end (both buffers), B
     * split from the weights, the columns' offsets, and the corners' positions, for every
     * sample */
    if (tma) { /* the barriers first, seen by every thread before any use (racecheck) */
        if (threadIdx.x == 0) {
            mbar_init(&win_bar[0]), mbar_init(&win_bar[1]);
            if (HALVES)
                mbar_init(&win_bar[2]), mbar_init(&win_bar[3]);
            mbar_init_fence();
        }
        __syncthreads();
    }
    if (!HALVES || team < sh.n) { /* (v18: a half may have no sample in a tiny batch) */
        if (tma)
            issue_window_tma<NT>(xh, x, team, c_lo, in, dhw, wstride, &wbar[0], tid);
        else if (WGMMA && (dhw & 1) == 0)
            issue_window<2, NT>(xh, x, team, c_lo, in, dhw, wstride, tid);
        else
            issue_window<1, NT>(xh, x, team, c_lo, in, dhw, wstride, tid);
    }
    for (int i = threadIdx.x; i < (HALVES ? 4 : 2) * C_IN * (len - in); i += CL_THREADS) {
        int w = i / (len - in); /* window w: buffer w / C_IN, channel w % C_IN */
        int at = WGMMA ? (w / C_IN) * win + (w % C_IN) * wstride : w * wstride;
        xs[at + in + (i - w * (len - in))] = 0.0f;
    }
    for (int i = threadIdx.x; i < NST * 128; i += CL_THREADS) {
        int st = i >> 7, w = i & 127; /* word w of step st: channel co, column k (v15_smem) */
        int co = 8 * (w >> 6) + ((w >> 2) & 7), k = 8 * st + 4 * ((w >> 5) & 1) + (w & 3);
        int tap = cols.tap[k];
        float v = tap >= 0 ? __ldg(weight + co * C_IN * KVOL + tap) : 0.0f;
        split_tf32(v, &sw.b_hi[st][w], &sw.b_lo[st][w]);
    }
    for (int k = threadIdx.x; k < 8 * NST; k += CL_THREADS)
        ((unsigned *)&sw.off[k / 8][k % 4])[(k % 8) / 4] = cols.off[k];
    if (threadIdx.x < C_OUT)
        sw.b[threadIdx.x] = __ldg(bias + threadIdx.x), cs.m[threadIdx.x] = __ldg(m + threadIdx.x);
    if (HALVES && threadIdx.x < C_OUT)
        cs1[0].m[threadIdx.x] = __ldg(m + threadIdx.x);
    if constexpr (TEAM) /* step 3: the weights of the tap past the steps */
        if (threadIdx.x < C_OUT)
            wcol[threadIdx.x] = __ldg(weight + threadIdx.x * C_IN * KVOL + cols.tap[8 * NST]);
    {
        unsigned mw = 0xffffffffu / (unsigned)sh.w, mh = 0xffffffffu / (unsigned)sh.h;
        for (int i = threadIdx.x; i < span; i += CL_THREADS) {
            unsigned c = c_lo + i, q = fast_div(c, sh.w, mw), od = fast_div(q, sh.h, mh);
            unsigned oh = q - od * sh.h, ow = c - q * sh.w;
            int ok = od < (unsigned)sh.od && oh < (unsigned)sh.oh && ow < (unsigned)sh.ow;
            ptab[i] = ok ? (int)((od * sh.oh + oh) * sh.ow + ow) : -1;
        }
    }
    /* v16's wgmma reads B through the async proxy: order these generic stores before it */
    if (WGMMA)
        fence_proxy_async(); /* hopper.cuh */
    __syncthreads();

    /* the lane's corners. Warp w's tile r is the corners w0 + 256 r + 4 i, i = 0 .. 15 (row i of
     * the tile), w0 = 64 (w / 4) + w % 4: warps 4 q .. 4 q + 3 interleave over corners 64 q ..
     * 64 q + 63, the 16 warps cover 256, so tile r adds 256 r. Lane (g, t) holds rows g and
     * g + 8: base = w0 + 4 g, and row g + 8 is base + 32. (For v16, warps 4 q .. 4 q + 3 are a
     * warpgroup, and warp 4 q + j holds rows 16 j .. 16 j + 15 of its 64-row tiles: which
     * corners those rows are is the warp's own choice, since it supplies their A.) The block's
     * count of positions, bc, is the same for every sample. */
    int base = 64 * (warp >> 2) + (warp & 3) + 4 * g, pos[V15_TILES][2], cnt = 0;
#pragma unroll
    for (int r = 0; r < V15_TILES; r++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            pos[r][hh] = ptab[base + TS * r + 32 * hh], cnt += pos[r][hh] >= 0;
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) /* over g: the 4 lanes of one g hold the same corners */
        cnt += __shfl_xor_sync(FULL, cnt, o);
    if (lane == 0)
        count[warp] = cnt;
    if (WGMMA && !TEAM && threadIdx.x == 0)
        mbar_init(&pushed_bar[0]), mbar_init(&pushed_bar[1]), mbar_init_fence();
    if (WGMMA && !TEAM) /* v16 pushes into its peers' shared memory: they must have started
                         * (racecheck) */
        cluster.sync();
    else
        __syncthreads();
    int bc = lane < NW ? count[lane] : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) /* every lane gets the sum */
        bc += __shfl_xor_sync(FULL, bc, o);
    /* v18: the second half starts its first conv when the first half has finished its own */
    if (HALVES && hx == 0 && team >= sh.n)
        named_arrive(3, 2 * NT);
    if (HALVES && hx == 1)
        named_sync(3, 2 * NT);

    int it = 0;
    for (int n = team; n < sh.n; n += teams, it++) {
        const float *xw = xh + (it & 1) * win;
        __pipeline_wait_prior(0); /* this sample's window has landed (each thread its own) */
        if (tma)
            mbar_wait(&wbar[it & 1], (it >> 1) & 1);
        member_sync<HALVES>(hx); /* (everyone's), and every warp is done with the last one */
        if (n + teams < sh.n) { /* the next sample's window, while this one computes */
            float *nd = xh + ((it + 1) & 1) * win;
            if (tma)
                issue_window_tma<NT>(nd, x, n + teams, c_lo, in, dhw, wstride,
                                     &wbar[(it + 1) & 1], tid);
            else if (WGMMA && (dhw & 1) == 0)
                issue_window<2, NT>(nd, x, n + teams, c_lo, in, dhw, wstride, tid);
            else
                issue_window<1, NT>(nd, x, n + teams, c_lo, in, dhw, wstride, tid);
        }

        /* 2. the conv, from the bias */
        float acc[V15_TILES][2][4];
#pragma unroll
        for (int r = 0; r < V15_TILES; r++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                acc[r][h][0] = acc[r][h][2] = sw.b[8 * h + 2 * t],
                acc[r][h][1] = acc[r][h][3] = sw.b[8 * h + 2 * t + 1];
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
        if (WGMMA)
            conv_wgmma<NST, TS>(acc, sw, xw + base, t);
        else
#endif
            conv_mma_sync(acc, sw, xw + base, lane);
        if constexpr (TEAM) { /* step 3: tap 80, the column past the steps, by FFMA in fp32 */
            const float *xc = xw + base + cols.off[8 * NST];
            float wc[2][2] = {{wcol[2 * t], wcol[2 * t + 1]}, {wcol[8 + 2 * t], wcol[9 + 2 * t]}};
#pragma unroll
            for (int r = 0; r < V15_TILES; r++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    float xv = xc[TS * r + 32 * hh];
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int e = 0; e < 2; e++)
                            acc[r][h][2 * hh + e] = fmaf(xv, wc[h][e], acc[r][h][2 * hh + e]);
                }
        }

        if (HALVES && hx == 0 && it == 0) /* v18: the second half may start its conv */
            named_arrive(3, 2 * NT);

        /* 3. the block's mean of each channel's conv, then its centred squares: the values are
         * in registers, so the second pass costs no memory. Lane (g, t) holds channels 2 t,
         * 2 t + 1 (h = 0) and 8 + 2 t, 9 + 2 t (h = 1); lanes of one t sum over g by shuffles.
         * a = c m has mean m mean(c) and M2 m^2 M2(c). */
        float s[2][2], zero[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}, bm, bq;
        lane_sums<false>(acc, pos, zero, s);
        if constexpr (HALVES) {
            /* v18: warp w of a half reduces channels 2 w (lanes 0 .. 7, lane j warp j's
             * partial) and 2 w + 1 (lanes 8 .. 15); the same steps on the half's barrier */
            int co = 2 * warp + ((lane >> 3) & 1);
            warp_part(part18[hx], warp, s);
            member_sync<HALVES>(hx);
            float bs = lane < 16 ? part18[hx][lane & 7][co] : 0.0f;
#pragma unroll
            for (int o = 4; o > 0; o >>= 1)
                bs += __shfl_xor_sync(FULL, bs, o);
            bm = bc > 0 ? bs / bc : 0.0f;
            if ((lane & 23) == 0) /* lanes 0 and 8 */
                bmean18[hx][co] = bm;
            member_sync<HALVES>(hx);
            float cm[2][2] = {{bmean18[hx][2 * t], bmean18[hx][2 * t + 1]},
                              {bmean18[hx][8 + 2 * t], bmean18[hx][9 + 2 * t]}};
            lane_sums<true>(acc, pos, cm, s);
            warp_part(part18[hx], warp, s);
            member_sync<HALVES>(hx);
            bq = lane < 16 ? part18[hx][lane & 7][co] : 0.0f;
#pragma unroll
            for (int o = 4; o > 0; o >>= 1)
                bq += __shfl_xor_sync(FULL, bq, o);
        } else {
            warp_part(sw.part, warp, s);
            __syncthreads();
            /* warp w: channel w's block sum */
            float bs = __shfl_sync(FULL, warp_sum(lane < 16 ? sw.part[lane][warp] : 0.0f), 0);
            bm = bc > 0 ? bs / bc : 0.0f; /* every lane alike: no shuffle below a branch */
            if (lane == 0)
                sw.bmean[warp] = bm;
            __syncthreads();
            float cm[2][2] = {{sw.bmean[2 * t], sw.bmean[2 * t + 1]},
                              {sw.bmean[8 + 2 * t], sw.bmean[9 + 2 * t]}};
            lane_sums<true>(acc, pos, cm, s);
            warp_part(sw.part, warp, s); /* every warp read sw.part before the barrier above */
            __syncthreads();
            bq = warp_sum(lane < 16 ? sw.part[lane][warp] : 0.0f);
        }

        /* 4. the exchange (cluster.cuh; the triples alternate between samples by parity):
         * v15 publishes the block's triple of channel w and pulls the others' after a cluster
         * barrier; v16 sends it to every peer by st.async and waits on its own mbarrier for
         * theirs; then y: u = m clamp(c m rstd - mean rstd), the max of the lane's four
         * channels, then over the group's four lanes by shuffles (v15: lane t = 0 writes it;
         * v16: a reduce-scatter, below) */
        if (HALVES) { /* v18: teams of up to 16, each warp two channels */
            int co = 2 * warp + ((lane >> 3) & 1);
            float mc = C.m[co];
            unsigned long long *rec = xch + (size_t)(2 * team + (it & 1)) * 16 * C_OUT * 3;
            if ((lane & 23) == 0) /* lanes 0 and 8 */
                team_publish<16>(rec, rank, co,
                                 make_float4((float)bc, bm * mc, bq * mc * mc, 0.0f), tag0 + n);
            team_merge16(&C, rec, warp, tag0 + n, sh.s, ncl);
            member_sync<HALVES>(hx);
        } else if (TEAM) {
            float mc = cs.m[warp];
            unsigned long long *rec = xch + (size_t)(2 * blockIdx.y + (it & 1)) * CL * C_OUT * 3;
            if (lane == 0)
                team_publish(rec, rank, warp,
                             make_float4((float)bc, bm * mc, bq * mc * mc, 0.0f), tag0 + n);
            team_merge(&cs, rec, tag0 + n, sh.s, ncl);
        } else if (WGMMA) {
            float mc = cs.m[warp];
            float4 w = make_float4((float)bc, bm * mc, __shfl_sync(FULL, bq, 0) * mc * mc, 0.0f);
            float4 *in = pushed + (it & 1) * CL * C_OUT;
            if (lane < ncl)
                cluster_push(in, rank * C_OUT + warp, w, &pushed_bar[it & 1], lane, rank);
            cluster_merge_pushed(&cs, in, &pushed_bar[it & 1], (it >> 1) & 1, sh.s, ncl);
        } else {
            if (lane == 0) {
                float mc = cs.m[warp];
                welford w = {bc, bm * mc, bq * mc * mc};
                cs.wf[it & 1][warp] = w;
            }
            cluster_merge(&cs, sh.s, it & 1, ncl);
        }
        float k1[2][2], k0[2][2], mult[2][2];
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int co = 8 * h + 2 * t + e;
                mult[h][e] = C.m[co], k1[h][e] = C.m[co] * C.rstd[co],
                k0[h][e] = -C.mean[co] * C.rstd[co];
                if (TEAM) /* v17 (step 2): lane_max_folded's a1, a0 and lim */
                    k1[h][e] *= mult[h][e], k0[h][e] *= mult[h][e],
                        mult[h][e] = fabsf(mult[h][e]);
            }
        float *yn = y + (size_t)n * sh.s;
        if (WGMMA) {
            /* v16 (step 5): the lane's 14 maxima of its 4 channels, items q = 2 r + hh, then a
             * reduce-scatter over the group's 4 lanes: 7 + 4 shuffles where v15 takes 28, and
             * lane t stores items t, 4 + t, 8 + t and (lanes 0, 1) 12 + t */
            static_assert(V15_TILES % 2 == 1, "the reduce-scatter takes an odd count of tiles");
            float v[2 * V15_TILES];
#pragma unroll
            for (int r = 0; r < V15_TILES; r++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++)
                    v[2 * r + hh] = TEAM ? lane_max_folded(acc[r], hh, k1, k0, mult)
                                         : lane_max(acc[r], hh, k1, k0, mult);
            /* lanes t and t ^ 1: each keeps one item of a pair and sends the other, so w[i] is
             * item 2 i + (t & 1) over both; then lanes t and t ^ 2 the same over w's pairs, so
             * z is item 4 j + t over all four (fmaxf drops a NaN, torch.max keeps it; finite x
             * has none) */
            int b0 = t & 1, b1 = t >> 1;
            float w[V15_TILES];
#pragma unroll
            for (int i = 0; i < V15_TILES; i++) {
                float send = b0 ? v[2 * i] : v[2 * i + 1], keep = b0 ? v[2 * i + 1] : v[2 * i];
                w[i] = fmaxf(keep, __shfl_xor_sync(FULL, send, 1));
            }
#pragma unroll
            for (int j = 0; j < V15_TILES / 2; j++) {
                float send = b1 ? w[2 * j] : w[2 * j + 1], keep = b1 ? w[2 * j + 1] : w[2 * j];
                float z = fmaxf(keep, __shfl_xor_sync(FULL, send, 2));
                int p = ptab[base + TS * (2 * j + b1) + 32 * b0]; /* item 4 j + t's corner */
                if (p >= 0)
                    yn[p] = z;
            }
            float z = fmaxf(w[V15_TILES - 1], __shfl_xor_sync(FULL, w[V15_TILES - 1], 2));
            int p = ptab[base + TS * (V15_TILES - 1) + 32 * b0]; /* the last pair's item */
            if (b1 == 0 && p >= 0)
                yn[p] = z;
        } else {
#pragma unroll
            for (int r = 0; r < V15_TILES; r++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    float best = lane_max(acc[r], hh, k1, k0, mult);
                    /* fmaxf across lanes drops a NaN (torch.max keeps it); finite x has none */
                    best = fmaxf(best, __shfl_xor_sync(FULL, best, 1));
                    best = fmaxf(best, __shfl_xor_sync(FULL, best, 2));
                    if (t == 0 && pos[r][hh] >= 0)
                        yn[pos[r][hh]] = best;
                }
        }
        if (rank == 0 && tid < C_OUT)
            mean[n * C_OUT + tid] = C.mean[tid], rstd[n * C_OUT + tid] = C.rstd[tid];
    }
    if (!TEAM)
        cluster.sync(); /* no block may exit while another still reads its partials (v15),
                         * nor while its own st.async stores may still be on their way to a
                         * peer (v16) */
#endif
}

/* persistent clusters, as many as fit at once, each taking samples blockIdx.y, + gridDim.y, ...;
 * a cluster has as many blocks as a sample's corners need (8 at the KernelBench shape). v17
 * (TEAM): the same grid without the cluster, as many teams as the occupancy API says fit at once
 * (one block an SM: 16 teams of 8 on 132 SMs), launched cooperatively. v14 where a sample needs
 * more than CL blocks, the two windows do not fit shared memory, or no cluster (no team) fits the
 * GPU. wstride: the window's length rounded up to 1 mod 4 (v15), so that channel ci's offsets
 * shift by ci mod 4 (at 0 mod 4, the KernelBench shape's offsets fall in three classes of 27 and
 * 15 of the 22 column groups conflict; at 1 mod 4, 5 do), or to 2 mod 4 (v16, v17; v16's steps 4
 * and 6: 6 groups conflict, the window's copies can be 8 bytes wide, and channels 0 and 2 start
 * 16-byte aligned for bulk copies; v17's 20 groups of 80 taps: 11 conflict, step 3). v18
 * (HALVES): the same grid and launch as v17's with members of 896 corners, up to 16 a team, a row
 * of blocks two teams, as many rows as fit but at most sm_count / 4 (r->xch holds sm_count x 2 CL
 * teams' words, 2 x 16 a v18 row). The columns and the clusters that fit are cached by shape (the
 * harness runs on one device). */
static unsigned team_tag0 = 1; /* v17, v18: the next launch's base tag (0: the words' initial
                                * tag); one count for both, since they share the words */

template <bool WGMMA, bool TEAM = false, bool HALVES = false>
static void register_conv_launch(const run_ctx *r, int scope)
{
    const shape *sh = &r->sh;
    const int span = HALVES ? 16 * V18_WARPS * V15_TILES : V15_SPAN;
    int hw = sh->h * sh->w, ncl = ceil_div(sh->od * hw, span);
    unsigned len = span + 2 * hw + 2 * sh->w + 2;
    unsigned wstride = WGMMA ? len + ((2u - len) & 3u) : len + ((1u - len) & 3u);
    size_t smem = (HALVES ? 16 : 8) * (size_t)v15_buffer(wstride, WGMMA) + 4 * (size_t)span;
    if (ncl > (HALVES ? V18_RANKS : CL) || smem > r->smem_optin) {
        v14_launch(r, scope);
        return;
    }
    static int opted;   /* the kernel's shared-memory opt-in is set (cluster_launch_make) */
    static shape last;  /* the shape of the cache below */
    static int resident; /* clusters (v17: teams) that fit at once */
    static v15_cols cols;
    auto kernel = k_register_conv<WGMMA, TEAM, HALVES>;
    cluster_launch L;
    cluster_launch_make(&L, (const void *)kernel, &opted, r->smem_optin, ncl, dim3(ncl, sh->n),
                        CL_THREADS, smem);
    if (TEAM) /* the same launch, cooperative instead of clustered */
        L.attr.id = cudaLaunchAttributeCooperative, L.attr.val.cooperative = 1;
    if (resident == 0 || memcmp(&last, sh, sizeof last) != 0) {
        if (TEAM) {
            int per_sm = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, CL_THREADS,
                                                                     smem));
            resident = per_sm * r->sm_count / ncl;
            if (resident > r->sm_count) /* r->xch holds sm_count teams' words */
                resident = r->sm_count;
            if (HALVES && resident > r->sm_count * CL / (2 * V18_RANKS)) /* v18: 2 teams a */
                resident = r->sm_count * CL / (2 * V18_RANKS); /* row of twice as many words */
        } else {
            resident = resident_clusters(&L, (const void *)kernel);
        }
        last = *sh;
        v15_columns(sh, wstride, TEAM ? V17_KSTEPS : V15_KSTEPS, &cols);
    }
    if (resident == 0) {
        v14_launch(r, scope);
        return;
    }
    int rows = HALVES ? (sh->n + 1) / 2 : sh->n; /* v18: a row of blocks is two teams */
    L.cfg.gridDim = dim3(ncl, resident < rows ? resident : rows);
    CUDA_CHECK(cudaLaunchKernelEx(&L.cfg, kernel, r->x, r->weight, r->bias, r->m, r->y, r->mean,
                                  r->rstd, r->sh, cols, wstride, r->xch, team_tag0));
    if (TEAM)
        team_tag0 += (unsigned)sh->n;
}

void v15_launch(const run_ctx *r, int scope) { register_conv_launch<false>(r, scope); }
void v16_launch(const run_ctx *r, int scope) { register_conv_launch<true>(r, scope); }
void v17_launch(const run_ctx *r, int scope) { register_conv_launch<true, true>(r, scope); }
void v18_launch(const run_ctx *r, int scope) { register_conv_launch<true, true, true>(r, scope); }
