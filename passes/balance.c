/* balance.c -- balanced pipeline stages for policy = auto (passes/search.c;
 * docs/plan-search.md, "Balanced stages").
 *
 * The planner's default op-assign cuts the blocks' layers into runs as
 * even in count as they go (plan.c).  When layers differ (a Swin-like
 * model's widths, an encoder and a decoder) or the ops outside the layers
 * are heavy (a large vocabulary's head on the last stage, the embedding on
 * the first), even counts leave one stage slower than the rest, and a
 * pipeline runs at its slowest stage's pace.  Here the cut minimises the
 * slowest stage's time:
 *
 *   layers 0 .. nl-1 with costs cost[l] (forward and backward, on the cost
 *   model), `pre` on virtual stage 0 and `post` on the last; parts virtual
 *   stages of consecutive layers, at least one layer each; virtual stage j
 *   runs on stage j % pp (interleaved: chunks per stage), so a stage's time
 *   is the sum of its virtual stages'.  Minimise the largest stage time.
 *
 * A binary search on the makespan T runs from the even cut's down, asking
 * "is there a cut with every stage at most T?".  With one chunk per stage
 * a greedy pass answers it exactly (fits_greedy).  With chunks (a stage's
 * virtual stages are not adjacent, so its time is a sum of separate runs)
 * the greedy search on the virtual stages alone gives a first cut, and Z3
 * answers for the stages' sums from there (QF_ALIA: the cut points are integer variables, the costs'
 * prefix sums a constant array read at them).  The search has a budget of
 * Z3's work (its resource count, deterministic: not a time, which would
 * make the cut, and so the plan, depend on the machine's load) and a time
 * limit as a net; an unknown answer ends it, and the best cut found so
 * far is the result (the even cut when Z3 finds none better).  Costs are scaled to
 * integers (1e6 units for the whole model), so the optimum is exact to a
 * millionth of the step. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <z3.h>

#include "passes.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The largest stage time of cut (integer costs). */
static int64_t makespan(const int64_t *S, int64_t pre, int64_t post, int parts, int pp, const int *cut)
{
    int64_t worst = 0;
    for (int s = 0; s < pp; s++) {
        int64_t t = (s == 0 ? pre : 0) + (s == pp - 1 ? post : 0);
        for (int j = s; j < parts; j += pp) t += S[cut[j + 1]] - S[cut[j]];
        if (t > worst) worst = t;
    }
    return worst;
}

/* One chunk per stage: is there a cut with every stage at most T?  Greedy
 * from the front (stage 0 holds T - pre, the last T - post, the others T),
 * each stage taking what fits while leaving a layer for each stage after
 * it; exact: the prefix k greedy stages cover is the longest any k cover,
 * and with fewer stages used a run of two or more layers splits (nl >=
 * parts).  The cut in cut when there is one. */
static int fits_greedy(const int64_t *S, int nl, int64_t pre, int64_t post, int parts, int64_t T, int *cut)
{
    int l = 0;
    cut[0] = 0;
    for (int k = 0; k < parts; k++) {
        int64_t cap = T - (k == 0 ? pre : 0) - (k == parts - 1 ? post : 0);
        int e = l;
        if (k == parts - 1) e = nl;
        else
            while (e < nl - (parts - 1 - k) && S[e + 1] - S[l] <= cap) e++;
        if (e == l || S[e] - S[l] > cap) return 0;   /* (a stage of no layer, or one over T) */
        cut[k + 1] = e;
        l = e;
    }
    return 1;
}

/* A cut at most T that spreads the layers: each stage aims at the work left
 * over the stages left, so the stages the slowest one does not bind are not
 * packed full at the front (stage 0 keeps the most micro-batches' stash in
 * 1F1B).  0 when it misses T (the greedy cut then stands). */
static int spread(const int64_t *S, int nl, int64_t pre, int64_t post, int parts, int64_t T, int *cut)
{
    int l = 0;
    cut[0] = 0;
    for (int k = 0; k < parts; k++) {
        int64_t cap = T - (k == 0 ? pre : 0) - (k == parts - 1 ? post : 0);
        int e = l + 1;
        if (k == parts - 1) e = nl;
        else {
            double aim = (double)(S[nl] - S[l] + post + (k == 0 ? pre : 0)) / (parts - k) - (k == 0 ? pre : 0);
            while (e < nl - (parts - 1 - k) && S[e + 1] - S[l] <= cap &&
                   fabs((double)(S[e + 1] - S[l]) - aim) < fabs((double)(S[e] - S[l]) - aim))
                e++;
        }
        if (S[e] - S[l] > cap) return 0;
        cut[k + 1] = e;
        l = e;
    }
    return 1;
}

static void on_z3_error(Z3_context c, Z3_error_code e)
{
    (void)c;
    (void)e;   /* (the query's answer is then unknown: the search keeps its best) */
}

/* Z3's resource count so far (its statistic "rlimit count": a count of its
 * steps, the same on every run). */
static uint64_t z3_work(Z3_context z, Z3_solver sv)
{
    Z3_stats st = Z3_solver_get_statistics(z, sv);
    Z3_stats_inc_ref(z, st);
    uint64_t n = 0;
    for (unsigned i = 0; i < Z3_stats_size(z, st); i++)
        if (!strcmp(Z3_stats_get_key(z, st, i), "rlimit count"))
            n = Z3_stats_is_uint(z, st, i) ? Z3_stats_get_uint_value(z, st, i)
                                           : (uint64_t)Z3_stats_get_double_value(z, st, i);
    Z3_stats_dec_ref(z, st);
    return n;
}

int pass_balance_cuts(int nl, const double *cost, double pre, double post, int pp, int parts, double budget_s,
                      uint64_t work, int *cut, double *best_ms, double *even_ms)
{
    if (parts < 1 || pp < 1 || parts % pp || nl < parts) return 1;
    double total = pre + post;
    for (int l = 0; l < nl; l++) total += cost[l] > 0 ? cost[l] : 0;
    if (!(total > 0)) return 1;
    const double unit = total / 1e6;
    int64_t *S = ir_xmalloc(sizeof(int64_t) * ((size_t)nl + 1));
    S[0] = 0;
    for (int l = 0; l < nl; l++) S[l + 1] = S[l] + (cost[l] > 0 ? llround(cost[l] / unit) : 0);
    int64_t ipre = llround(pre / unit), ipost = llround(post / unit);
    /* the even cut, as plan.c makes it: layer l on virtual stage l * parts / nl */
    for (int j = 0; j <= parts; j++) cut[j] = (int)(((int64_t)j * nl + parts - 1) / parts);
    int64_t best = makespan(S, ipre, ipost, parts, pp, cut), lo = (S[nl] + ipre + ipost + pp - 1) / pp;
    *even_ms = (double)best * unit * 1e3;
    *best_ms = *even_ms;
    int *tmp = ir_xmalloc(sizeof(int) * ((size_t)parts + 1));
    /* each virtual stage balanced on its own (the greedy check, exact when
       it is its stage's only chunk): with one chunk per stage the answer,
       with chunks the best-so-far that Z3 starts from */
    int improved = 0;
    {
        int64_t vlo = (S[nl] + ipre + ipost + parts - 1) / parts, vbest = makespan(S, ipre, ipost, parts, parts, cut);
        int *vc = ir_xmalloc(sizeof(int) * ((size_t)parts + 1));
        memcpy(vc, cut, sizeof(int) * ((size_t)parts + 1));
        while (vlo < vbest) {
            int64_t T = vlo + (vbest - vlo) / 2;
            if (fits_greedy(S, nl, ipre, ipost, parts, T, tmp)) {
                memcpy(vc, tmp, sizeof(int) * ((size_t)parts + 1));
                vbest = makespan(S, ipre, ipost, parts, parts, vc);
            } else vlo = T + 1;
        }
        if (spread(S, nl, ipre, ipost, parts, vbest, tmp) && makespan(S, ipre, ipost, parts, parts, tmp) <= vbest)
            memcpy(vc, tmp, sizeof(int) * ((size_t)parts + 1));
        int64_t got = makespan(S, ipre, ipost, parts, pp, vc);
        if (got < best) {
            memcpy(cut, vc, sizeof(int) * ((size_t)parts + 1));
            best = got;
            improved = 1;
        }
        free(vc);
    }
    if (parts == pp) {
        free(tmp);
        free(S);
        *best_ms = (double)best * unit * 1e3;
        return improved ? 0 : 1;
    }

    Z3_config cfg = Z3_mk_config();
    Z3_context z = Z3_mk_context(cfg);
    Z3_del_config(cfg);
    Z3_set_error_handler(z, on_z3_error);
    Z3_sort I = Z3_mk_int_sort(z);
    /* the prefix sums as a constant array */
    Z3_ast arr = Z3_mk_const_array(z, I, Z3_mk_int64(z, 0, I));
    for (int l = 1; l <= nl; l++) arr = Z3_mk_store(z, arr, Z3_mk_int(z, l, I), Z3_mk_int64(z, S[l], I));
    Z3_ast *c = ir_xmalloc(sizeof(Z3_ast) * ((size_t)parts + 1));
    char nm[32];
    for (int j = 0; j <= parts; j++) {
        snprintf(nm, sizeof nm, "cut%d", j);
        c[j] = Z3_mk_const(z, Z3_mk_string_symbol(z, nm), I);
    }
    Z3_solver sv = Z3_mk_solver(z);
    Z3_solver_inc_ref(z, sv);
    Z3_solver_assert(z, sv, Z3_mk_eq(z, c[0], Z3_mk_int(z, 0, I)));
    Z3_solver_assert(z, sv, Z3_mk_eq(z, c[parts], Z3_mk_int(z, nl, I)));
    for (int j = 0; j < parts; j++) Z3_solver_assert(z, sv, Z3_mk_lt(z, c[j], c[j + 1]));
    /* each stage's time, a term */
    Z3_ast *st = ir_xmalloc(sizeof(Z3_ast) * (size_t)pp);
    Z3_ast *terms = ir_xmalloc(sizeof(Z3_ast) * ((size_t)(parts / pp) + 2));
    for (int s = 0; s < pp; s++) {
        int nt = 0;
        terms[nt++] = Z3_mk_int64(z, (s == 0 ? ipre : 0) + (s == pp - 1 ? ipost : 0), I);
        for (int j = s; j < parts; j += pp) {
            Z3_ast d[2] = {Z3_mk_select(z, arr, c[j + 1]), Z3_mk_select(z, arr, c[j])};
            terms[nt++] = Z3_mk_sub(z, 2, d);
        }
        st[s] = Z3_mk_add(z, (unsigned)nt, terms);
    }
    free(terms);
    Z3_params prm = Z3_mk_params(z);
    Z3_params_inc_ref(z, prm);
    const double t0 = now_s();
    uint64_t w0 = work ? z3_work(z, sv) : 0;
    while (lo < best) {
        double left = budget_s - (now_s() - t0);
        if (left <= 0.001) break;
        uint64_t used = work ? z3_work(z, sv) - w0 : 0;
        if (work && used >= work) break;
        int64_t T = lo + (best - lo) / 2;
        unsigned ms = (unsigned)(left * 1e3 < 1 ? 1 : left * 1e3);
        Z3_params_set_uint(z, prm, Z3_mk_string_symbol(z, "timeout"), ms);
        if (work)   /* (Z3 counts it per query) */
            Z3_params_set_uint(z, prm, Z3_mk_string_symbol(z, "rlimit"),
                               (unsigned)(work - used < UINT32_MAX ? work - used : UINT32_MAX));
        Z3_solver_set_params(z, sv, prm);
        Z3_solver_push(z, sv);
        Z3_ast bound = Z3_mk_int64(z, T, I);
        for (int s = 0; s < pp; s++) Z3_solver_assert(z, sv, Z3_mk_le(z, st[s], bound));
        Z3_lbool r = Z3_solver_check(z, sv);
        int ok = 0;
        if (r == Z3_L_TRUE) {
            Z3_model m = Z3_solver_get_model(z, sv);
            Z3_model_inc_ref(z, m);
            ok = 1;
            for (int j = 0; j <= parts && ok; j++) {
                Z3_ast v;
                int64_t x;
                ok = Z3_model_eval(z, m, c[j], true, &v) && Z3_get_numeral_int64(z, v, &x) && x >= 0 && x <= nl;
                tmp[j] = (int)x;
            }
            Z3_model_dec_ref(z, m);
            for (int j = 0; j < parts && ok; j++) ok = tmp[j] < tmp[j + 1];
            int64_t got = ok ? makespan(S, ipre, ipost, parts, pp, tmp) : INT64_MAX;
            if (ok && got <= T) {   /* (checked here, not taken from Z3) */
                memcpy(cut, tmp, sizeof(int) * ((size_t)parts + 1));
                best = got;
                improved = 1;
            } else ok = 0;
        }
        Z3_solver_pop(z, sv, 1);
        if (r == Z3_L_FALSE) lo = T + 1;
        else if (!ok) break;   /* unknown (out of work or time): the best so far */
    }
    Z3_params_dec_ref(z, prm);
    Z3_solver_dec_ref(z, sv);
    Z3_del_context(z);
    free(st);
    free(c);
    free(tmp);
    free(S);
    *best_ms = (double)best * unit * 1e3;
    return improved ? 0 : 1;
}
