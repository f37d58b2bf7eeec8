/* SPDX-License-Identifier: Apache-2.0 */
/* ABI completeness: libsymmcoll exports exactly the real NCCL's nccl and pnccl functions, the
 * symbol list in nccl_api.h names every one of them, and the fake NCCL defines them all.
 * Usage: test_abi_symbols <real libnccl.so.2 or ''> <libsymmcoll.so> <fake libnccl.so.2> */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "nccl_api.h"

#define MAX_SYMBOLS 1024

struct symbolSet {
  int n;
  char* names[MAX_SYMBOLS];
};

static int isNcclName(const char* s) {
  return strncmp(s, "nccl", 4) == 0 || strncmp(s, "pnccl", 5) == 0;
}

static int byString(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

/* Functions (and aliases) that the object defines and exports: .dynsym entries that are not
 * undefined, have global or weak binding and default or protected visibility. */
static int readExports(const char* path, struct symbolSet* set) {
  set->n = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(Elf64_Ehdr)) {
    close(fd);
    fprintf(stderr, "%s: not an ELF file\n", path);
    return -1;
  }
  size_t size = (size_t)st.st_size;
  const unsigned char* base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    fprintf(stderr, "cannot map %s: %s\n", path, strerror(errno));
    return -1;
  }
  int rc = -1;
  const Elf64_Ehdr* eh = (const Elf64_Ehdr*)base;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
      eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > size) {
    fprintf(stderr, "%s: not a 64-bit ELF object with section headers\n", path);
    goto unmap;
  }
  const Elf64_Shdr* sh = (const Elf64_Shdr*)(base + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    if (sh[i].sh_link >= eh->e_shnum || sh[i].sh_offset + sh[i].sh_size > size) goto unmap;
    const Elf64_Shdr* strtab = &sh[sh[i].sh_link];
    if (strtab->sh_offset + strtab->sh_size > size) goto unmap;
    const char* strings = (const char*)(base + strtab->sh_offset);
    const Elf64_Sym* syms = (const Elf64_Sym*)(base + sh[i].sh_offset);
    size_t count = sh[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < count; k++) {
      const Elf64_Sym* s = &syms[k];
      int bind = ELF64_ST_BIND(s->st_info), vis = ELF64_ST_VISIBILITY(s->st_other);
      if (s->st_shndx == SHN_UNDEF || s->st_name >= strtab->sh_size) continue;
      if (bind != STB_GLOBAL && bind != STB_WEAK) continue;
      if (vis != STV_DEFAULT && vis != STV_PROTECTED) continue;
      const char* name = strings + s->st_name;
      if (!isNcclName(name) || set->n >= MAX_SYMBOLS) continue;
      set->names[set->n++] = strdup(name);
    }
    rc = 0;
  }
  if (rc != 0) fprintf(stderr, "%s: no dynamic symbol table\n", path);
  qsort(set->names, (size_t)set->n, sizeof(set->names[0]), byString);
unmap:
  munmap((void*)base, size);
  return rc;
}

static int contains(const struct symbolSet* set, const char* name) {
  return bsearch(&name, set->names, (size_t)set->n, sizeof(set->names[0]), byString) != NULL;
}

/* Every name of `want` is in `have`; prints the missing ones. Returns how many are missing. */
static int missingFrom(const struct symbolSet* want, const struct symbolSet* have, const char* what) {
  int missing = 0;
  for (int i = 0; i < want->n; i++) {
    if (!contains(have, want->names[i])) {
      fprintf(stderr, "%s lacks %s\n", what, want->names[i]);
      missing++;
    }
  }
  return missing;
}

static void freeSet(struct symbolSet* set) {
  for (int i = 0; i < set->n; i++) free(set->names[i]);
  set->n = 0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s <real libnccl.so.2|''> <libsymmcoll.so> <fake libnccl.so.2>\n", argv[0]);
    return 2;
  }
  if (argv[1][0] == '\0') {
    printf("test_abi_symbols: no real NCCL was found at configure time: skipped\n");
    return TEST_SKIP_CODE;
  }
  static struct symbolSet real, ours, fake, listed;
  CHECK_EQ_INT(readExports(argv[1], &real), 0);
  CHECK_EQ_INT(readExports(argv[2], &ours), 0);
  CHECK_EQ_INT(readExports(argv[3], &fake), 0);

  int realPlain = 0, realProfiling = 0;
  for (int i = 0; i < real.n; i++) {
    if (real.names[i][0] == 'p') realProfiling++;
    else realPlain++;
  }
  printf("real NCCL %s exports %d nccl* + %d pnccl* = %d; libsymmcoll exports %d\n", argv[1],
         realPlain, realProfiling, real.n, ours.n);
  CHECK(real.n > 0);

  /* Exactly the same set, both ways. */
  CHECK_EQ_INT(missingFrom(&real, &ours, "libsymmcoll"), 0);
  CHECK_EQ_INT(missingFrom(&ours, &real, "the real NCCL"), 0);
  CHECK_EQ_INT(ours.n, real.n);

  /* The one list covers every plain entry point (pnccl* are aliases of listed names). */
#define ADD_LISTED(ret, name, params, args, fail) listed.names[listed.n++] = strdup(#name);
  SYMMCOLL_ALL_FUNCS(ADD_LISTED)
#undef ADD_LISTED
  qsort(listed.names, (size_t)listed.n, sizeof(listed.names[0]), byString);
  for (int i = 0; i < real.n; i++) {
    const char* name = real.names[i][0] == 'p' ? real.names[i] + 1 : real.names[i];
    if (!contains(&listed, name)) fprintf(stderr, "nccl_api.h does not list %s\n", name);
    CHECK(contains(&listed, name));
  }
  CHECK_EQ_INT(missingFrom(&listed, &real, "the real NCCL"), 0);
  CHECK_EQ_INT(listed.n, realPlain);

  /* The fake stands in for the real NCCL in the forwarding tests: it must define everything. */
  CHECK_EQ_INT(missingFrom(&real, &fake, "the fake NCCL"), 0);

  freeSet(&real);
  freeSet(&ours);
  freeSet(&fake);
  freeSet(&listed);
  return harnessReport("test_abi_symbols");
}
