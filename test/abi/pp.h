/* SPDX-License-Identifier: Apache-2.0 */
/* Preprocessor helpers that walk the argument lists of the NCCL symbol list (nccl_api.h). */
#ifndef SYMMCOLL_TEST_PP_H
#define SYMMCOLL_TEST_PP_H

#define PP_CAT(a, b) PP_CAT_(a, b)
#define PP_CAT_(a, b) a##b
#define PP_UNWRAP(...) __VA_ARGS__

/* 1 when the arguments are non-empty, nothing otherwise. */
#define PP_NONEMPTY(...) __VA_OPT__(1)

/* PP_IF_NONEMPTY((list))(then)(else): `then` when the parenthesised list has tokens. */
#define PP_IF_NONEMPTY(list) PP_CAT(PP_IF_, PP_NONEMPTY list)
#define PP_IF_1(...) __VA_ARGS__ PP_EAT
#define PP_IF_(...) PP_KEEP
#define PP_EAT(...)
#define PP_KEEP(...) __VA_ARGS__

/* Number of arguments, 0..10 (the longest NCCL entry point takes 8). */
#define PP_COUNT(...) PP_COUNT_(0 __VA_OPT__(,) __VA_ARGS__, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, ~)
#define PP_COUNT_(z, a, b, c, d, e, f, g, h, i, j, n, ...) n

/* PP_FOR_EACH(M, ctx, a, b, ...) expands to M(ctx, a) M(ctx, b) ...; nothing when empty. */
#define PP_FOR_EACH(M, ctx, ...) PP_CAT(PP_FE_, PP_COUNT(__VA_ARGS__))(M, ctx, __VA_ARGS__)
#define PP_FE_0(M, c, ...)
#define PP_FE_1(M, c, x) M(c, x)
#define PP_FE_2(M, c, x, ...) M(c, x) PP_FE_1(M, c, __VA_ARGS__)
#define PP_FE_3(M, c, x, ...) M(c, x) PP_FE_2(M, c, __VA_ARGS__)
#define PP_FE_4(M, c, x, ...) M(c, x) PP_FE_3(M, c, __VA_ARGS__)
#define PP_FE_5(M, c, x, ...) M(c, x) PP_FE_4(M, c, __VA_ARGS__)
#define PP_FE_6(M, c, x, ...) M(c, x) PP_FE_5(M, c, __VA_ARGS__)
#define PP_FE_7(M, c, x, ...) M(c, x) PP_FE_6(M, c, __VA_ARGS__)
#define PP_FE_8(M, c, x, ...) M(c, x) PP_FE_7(M, c, __VA_ARGS__)
#define PP_FE_9(M, c, x, ...) M(c, x) PP_FE_8(M, c, __VA_ARGS__)
#define PP_FE_10(M, c, x, ...) M(c, x) PP_FE_9(M, c, __VA_ARGS__)

/* The same, separating the expansions with commas (argument lists). */
#define PP_MAP_COMMA(M, ctx, ...) PP_CAT(PP_MC_, PP_COUNT(__VA_ARGS__))(M, ctx, __VA_ARGS__)
#define PP_MC_0(M, c, ...)
#define PP_MC_1(M, c, x) M(c, x)
#define PP_MC_2(M, c, x, ...) M(c, x), PP_MC_1(M, c, __VA_ARGS__)
#define PP_MC_3(M, c, x, ...) M(c, x), PP_MC_2(M, c, __VA_ARGS__)
#define PP_MC_4(M, c, x, ...) M(c, x), PP_MC_3(M, c, __VA_ARGS__)
#define PP_MC_5(M, c, x, ...) M(c, x), PP_MC_4(M, c, __VA_ARGS__)
#define PP_MC_6(M, c, x, ...) M(c, x), PP_MC_5(M, c, __VA_ARGS__)
#define PP_MC_7(M, c, x, ...) M(c, x), PP_MC_6(M, c, __VA_ARGS__)
#define PP_MC_8(M, c, x, ...) M(c, x), PP_MC_7(M, c, __VA_ARGS__)
#define PP_MC_9(M, c, x, ...) M(c, x), PP_MC_8(M, c, __VA_ARGS__)
#define PP_MC_10(M, c, x, ...) M(c, x), PP_MC_9(M, c, __VA_ARGS__)

#endif
