/*
 * tiers-trace-post --from-otf2 OUT DIR: rebuild raw rank files from the OTF2
 * archive DIR/traces.otf2 (a trace folder whose raw/ files were deleted),
 * so that the summary, the profile and the Chrome export are made from it
 * by the same code, and in the same bounded way, as from the raw files.
 *
 * The archive is read one location at a time through the OTF2 reader (which
 * reads its event chunks as it goes); each event becomes the raw record it
 * was made from, appended to OUT/raw/rank-NNNNNN.tev through a stdio
 * buffer: memory grows with the definitions (strings, regions,
 * communicators), never with the events.  Time stamps are the archive's
 * (already on rank 0's clock), so the CLOCK records say offset 0.  What the
 * archive does not hold is not made up: call sites (the Enter records have
 * none), one-sided and file transfer bytes, swap-out sizes, the buffer's
 * memory and the tracing settings.  A rank marked stopped in the archive
 * (region tiers_rank_stopped) gets no finalize clock step, so it reads as
 * stopped again, and the Leaves that closed its open calls (marked with
 * the attribute tiers_closed_at_stop) are left out, as they were.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <otf2/otf2.h>

#include "otf2raw.h"

enum { K_ENTER = 1, K_LEAVE, K_SEND, K_RECV, K_ISEND, K_ISEND_DONE, K_IRECV_POST, K_IRECV_DONE,
       K_COLL_BEGIN, K_COLL_END, K_COMM, K_SWAP, K_CLOCK, K_STOP, K_INFO, K_MEM, K_XFER, K_NAME };
#define FN_SWAPOUT 0xFFFF
#define SWAP_UNSYNC 4

typedef struct {
  char **s;
  uint32_t n, cap;
} strs_t;

typedef struct {
  uint32_t name;
  int64_t node;       /* system tree node (its name: the host) */
  int rank;           /* world rank ("MPI Rank r"), or -1 */
  FILE *f;            /* its raw file while its locations are read */
  int64_t first, last; /* first and last time stamp */
  int stopped;         /* has the tiers_rank_stopped region */
} lgroup_t;

typedef struct {
  uint64_t ref;
  uint32_t name;
  uint64_t group;
} loc_t;

typedef struct {
  uint32_t name;
  int func;   /* raw function id: index of the name in the header, FN_SWAPOUT, or -1 */
  int unsync; /* tiers_swapout_unsynchronised */
  int stop;   /* tiers_rank_stopped */
} region_t;

typedef struct {
  uint32_t n;
  int locations;     /* a COMM_LOCATIONS group: members are locations */
  uint64_t *members; /* COMM_GROUP: indices into the COMM_LOCATIONS group */
} group_t;

typedef struct {
  uint32_t name;
  uint64_t group, parent;
  int defined;
} comm_t;

typedef struct {
  strs_t strs;
  uint32_t *node_name; /* system tree node -> string */
  size_t nnodes;
  lgroup_t *lg;
  size_t nlg;
  loc_t *loc;
  size_t nloc, loccap;
  region_t *reg;
  size_t nreg;
  group_t *grp;
  size_t ngrp;
  comm_t *comm;
  size_t ncomm;
  /* while a location's events are read */
  lgroup_t *cur;
  uint16_t th;
  int64_t swap_t0; /* the Enter of the swap-out region being read, on this location */
  uint64_t events; /* events read */
  int64_t closed_attr; /* the attribute "tiers_closed_at_stop", or -1 */
  char why[9000];
} st_t;

static void *grow(void *p, size_t *cap, size_t need, size_t each) {
  if (need <= *cap) return p;
  size_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *q = realloc(p, c * each);
  if (!q) {
    fprintf(stderr, "tiers-trace-post: error: out of memory\n");
    exit(1);
  }
  memset((char *)q + *cap * each, 0, (c - *cap) * each);
  *cap = c;
  return q;
}

#define AT(arr, n, i, cap)                                                                     \
  ((arr) = grow((arr), &(cap), (size_t)(i) + 1, sizeof *(arr)),                                \
   (n) = (n) > (size_t)(i) + 1 ? (n) : (size_t)(i) + 1, &(arr)[i])

static size_t g_strcap, g_nodecap, g_lgcap, g_regcap, g_grpcap, g_commcap;

static const char *str_of(const st_t *s, uint32_t ref) {
  return ref < s->strs.n && s->strs.s[ref] ? s->strs.s[ref] : "";
}

/* --------------------------------------------------------------- definitions */

static OTF2_CallbackCode d_string(void *ud, OTF2_StringRef self, const char *string) {
  st_t *s = ud;
  size_t n = s->strs.n;
  char **slot = AT(s->strs.s, n, self, g_strcap);
  s->strs.n = (uint32_t)n;
  free(*slot);
  *slot = strdup(string);
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode d_node(void *ud, OTF2_SystemTreeNodeRef self, OTF2_StringRef name,
                                OTF2_StringRef cls, OTF2_SystemTreeNodeRef parent) {
  (void)cls;
  (void)parent;
  st_t *s = ud;
  *AT(s->node_name, s->nnodes, self, g_nodecap) = name;
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode d_lgroup(void *ud, OTF2_LocationGroupRef self, OTF2_StringRef name,
                                  OTF2_LocationGroupType type, OTF2_SystemTreeNodeRef parent,
                                  OTF2_LocationGroupRef creating) {
  (void)type;
  (void)creating;
  st_t *s = ud;
  lgroup_t *g = AT(s->lg, s->nlg, self, g_lgcap);
  g->name = name;
  g->node = parent;
  g->rank = -1;
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode d_location(void *ud, OTF2_LocationRef self, OTF2_StringRef name,
                                    OTF2_LocationType type, uint64_t nev,
                                    OTF2_LocationGroupRef group) {
  (void)type;
  (void)nev;
  st_t *s = ud;
  size_t i = s->nloc;
  loc_t *l = AT(s->loc, s->nloc, i, s->loccap);
  l->ref = self;
  l->name = name;
  l->group = group;
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode d_region(void *ud, OTF2_RegionRef self, OTF2_StringRef name,
                                  OTF2_StringRef canon, OTF2_StringRef desc, OTF2_RegionRole role,
                                  OTF2_Paradigm par, OTF2_RegionFlag flags, OTF2_StringRef file,
                                  uint32_t b, uint32_t e) {
  (void)canon; (void)desc; (void)role; (void)par; (void)flags; (void)file; (void)b; (void)e;
  st_t *s = ud;
  region_t *r = AT(s->reg, s->nreg, self, g_regcap);
  r->name = name;
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode d_group(void *ud, OTF2_GroupRef self, OTF2_StringRef name,
                                 OTF2_GroupType type, OTF2_Paradigm par, OTF2_GroupFlag flags,
                                 uint32_t n, const uint64_t *members) {
  (void)name; (void)par; (void)flags;
  st_t *s = ud;
  group_t *g = AT(s->grp, s->ngrp, self, g_grpcap);
  free(g->members);
  g->n = n;
  g->locations = type == OTF2_GROUP_TYPE_COMM_LOCATIONS;
  g->members = malloc((n ? n : 1) * sizeof *members);
  if (!g->members) return OTF2_CALLBACK_INTERRUPT;
  memcpy(g->members, members, n * sizeof *members);
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode d_attr(void *ud, OTF2_AttributeRef self, OTF2_StringRef name,
                                OTF2_StringRef desc, OTF2_Type type) {
  (void)desc;
  (void)type;
  st_t *s = ud;
  if (!strcmp(str_of(s, name), "tiers_closed_at_stop")) s->closed_attr = self;
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode d_comm(void *ud, OTF2_CommRef self, OTF2_StringRef name,
                                OTF2_GroupRef group, OTF2_CommRef parent, OTF2_CommFlag flags) {
  (void)flags;
  st_t *s = ud;
  comm_t *c = AT(s->comm, s->ncomm, self, g_commcap);
  c->name = name;
  c->group = group;
  c->parent = parent;
  c->defined = 1;
  return OTF2_CALLBACK_SUCCESS;
}

/* ------------------------------------------------------------------ records */

static void put_head(st_t *s, int kind, int flags, int func, size_t len, int64_t t) {
  unsigned char h[16];
  h[0] = (unsigned char)kind;
  h[1] = (unsigned char)flags;
  uint16_t th = s->th, fn = (uint16_t)func, words = (uint16_t)(len / 8);
  memcpy(h + 2, &th, 2);
  memcpy(h + 4, &fn, 2);
  memcpy(h + 6, &words, 2);
  memcpy(h + 8, &t, 8);
  fwrite(h, 1, 16, s->cur->f);
}

static void put_bytes(st_t *s, const void *p, size_t n) { fwrite(p, 1, n, s->cur->f); }

static void seen_time(st_t *s, int64_t t) {
  if (s->cur->first == INT64_MIN) s->cur->first = t;
  if (t > s->cur->last) s->cur->last = t;
}

/* the raw file's local id of communicator ref c: 0 the world, 1 self, else ref + 2 */
static int32_t cid_of(const st_t *s, uint64_t c) {
  if (c < s->ncomm && s->comm[c].defined) {
    const char *n = str_of(s, s->comm[c].name);
    if (!strcmp(n, "MPI_COMM_WORLD")) return 0;
    if (!strcmp(n, "MPI_COMM_SELF")) return 1;
  }
  return (int32_t)(c + 2);
}

static void put_msg(st_t *s, int kind, int64_t t, int32_t comm, uint32_t peer, uint32_t tag,
                    uint64_t bytes, uint64_t req) {
  put_head(s, kind, 0, 0, 48, t);
  int32_t v[4] = {comm, (int32_t)peer, (int32_t)tag, 0};
  put_bytes(s, v, sizeof v);
  uint64_t w[2] = {bytes, req};
  put_bytes(s, w, sizeof w);
  seen_time(s, t);
}

static OTF2_CallbackCode e_enter(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos, void *ud,
                                 OTF2_AttributeList *al, OTF2_RegionRef region) {
  (void)loc; (void)pos; (void)al;
  st_t *s = ud;
  if (region >= s->nreg) return OTF2_CALLBACK_SUCCESS;
  region_t *r = &s->reg[region];
  if (r->stop) { /* the mark of a stopped rank: made again from the missing finalize */
    s->cur->stopped = 1;
    return OTF2_CALLBACK_SUCCESS;
  }
  if (r->func < 0) return OTF2_CALLBACK_SUCCESS;
  if (r->func == FN_SWAPOUT) s->swap_t0 = (int64_t)t;
  put_head(s, K_ENTER, 0, r->func, 16, (int64_t)t);
  seen_time(s, (int64_t)t);
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode e_leave(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos, void *ud,
                                 OTF2_AttributeList *al, OTF2_RegionRef region) {
  (void)loc; (void)pos; (void)al;
  st_t *s = ud;
  if (region >= s->nreg) return OTF2_CALLBACK_SUCCESS;
  region_t *r = &s->reg[region];
  if (r->stop || r->func < 0) return OTF2_CALLBACK_SUCCESS;
  /* a Leave the post-processing added for a killed rank: not in its raw file */
  if (al && s->closed_attr >= 0 &&
      OTF2_AttributeList_TestAttributeByID(al, (OTF2_AttributeRef)s->closed_attr))
    return OTF2_CALLBACK_SUCCESS;
  put_head(s, K_LEAVE, 0, r->func, 16, (int64_t)t);
  seen_time(s, (int64_t)t);
  if (r->func == FN_SWAPOUT) {
    /* its SWAP record: the kind and the time in the region are in the
     * archive; the bytes written and the write's own time are not */
    put_head(s, K_SWAP, r->unsync ? SWAP_UNSYNC : 0, 0, 48, (int64_t)t);
    uint64_t w[4] = {0, 0, (uint64_t)((int64_t)t - s->swap_t0), 0};
    put_bytes(s, w, sizeof w);
  }
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode e_send(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos, void *ud,
                                OTF2_AttributeList *al, uint32_t peer, OTF2_CommRef comm,
                                uint32_t tag, uint64_t len) {
  (void)loc; (void)pos; (void)al;
  st_t *s = ud;
  put_msg(s, K_SEND, (int64_t)t, cid_of(s, comm), peer, tag, len, 0);
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode e_recv(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos, void *ud,
                                OTF2_AttributeList *al, uint32_t peer, OTF2_CommRef comm,
                                uint32_t tag, uint64_t len) {
  (void)loc; (void)pos; (void)al;
  st_t *s = ud;
  put_msg(s, K_RECV, (int64_t)t, cid_of(s, comm), peer, tag, len, 0);
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode e_isend(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos, void *ud,
                                 OTF2_AttributeList *al, uint32_t peer, OTF2_CommRef comm,
                                 uint32_t tag, uint64_t len, uint64_t req) {
  (void)loc; (void)pos; (void)al;
  st_t *s = ud;
  put_msg(s, K_ISEND, (int64_t)t, cid_of(s, comm), peer, tag, len, req);
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode e_irecv(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos, void *ud,
                                 OTF2_AttributeList *al, uint32_t peer, OTF2_CommRef comm,
                                 uint32_t tag, uint64_t len, uint64_t req) {
  (void)loc; (void)pos; (void)al;
  st_t *s = ud;
  put_msg(s, K_IRECV_DONE, (int64_t)t, cid_of(s, comm), peer, tag, len, req);
  return OTF2_CALLBACK_SUCCESS;
}

static void put_req(st_t *s, int kind, int64_t t, uint64_t req) {
  put_head(s, kind, 0, 0, 24, t);
  put_bytes(s, &req, 8);
  seen_time(s, t);
}

static OTF2_CallbackCode e_isend_done(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos,
                                      void *ud, OTF2_AttributeList *al, uint64_t req) {
  (void)loc; (void)pos; (void)al;
  put_req(ud, K_ISEND_DONE, (int64_t)t, req);
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode e_irecv_post(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos,
                                      void *ud, OTF2_AttributeList *al, uint64_t req) {
  (void)loc; (void)pos; (void)al;
  put_req(ud, K_IRECV_POST, (int64_t)t, req);
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode e_coll_begin(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos,
                                      void *ud, OTF2_AttributeList *al) {
  (void)loc; (void)pos; (void)al;
  st_t *s = ud;
  put_head(s, K_COLL_BEGIN, 0, 0, 16, (int64_t)t);
  seen_time(s, (int64_t)t);
  return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode e_coll_end(OTF2_LocationRef loc, OTF2_TimeStamp t, uint64_t pos,
                                    void *ud, OTF2_AttributeList *al, OTF2_CollectiveOp op,
                                    OTF2_CommRef comm, uint32_t root, uint64_t sent,
                                    uint64_t recvd) {
  (void)loc; (void)pos; (void)al;
  st_t *s = ud;
  put_head(s, K_COLL_END, 0, 0, 48, (int64_t)t);
  int32_t v[4] = {cid_of(s, comm), root == OTF2_UNDEFINED_UINT32 ? -1 : (int32_t)root,
                  (int32_t)op, 0};
  put_bytes(s, v, sizeof v);
  uint64_t w[2] = {sent, recvd};
  put_bytes(s, w, sizeof w);
  seen_time(s, (int64_t)t);
  return OTF2_CALLBACK_SUCCESS;
}

/* ------------------------------------------------------------------- files */

static void put_clock(st_t *s, int64_t t, int phase) {
  put_head(s, K_CLOCK, 0, 0, 40, t);
  int64_t v[2] = {0, 0};
  put_bytes(s, v, sizeof v);
  int32_t p[2] = {phase, 0};
  put_bytes(s, p, sizeof p);
}

/* the header and the communicators of location group g (rank r of n) */
static int open_rank(st_t *s, const char *out, size_t g, int n) {
  lgroup_t *lg = &s->lg[g];
  char path[4200];
  snprintf(path, sizeof path, "%s/raw/rank-%06d.tev", out, lg->rank);
  lg->f = fopen(path, "wb");
  if (!lg->f) {
    snprintf(s->why, sizeof s->why, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  setvbuf(lg->f, NULL, _IOFBF, 1 << 20);
  lg->first = INT64_MIN;
  lg->last = INT64_MIN;
  const char *host = lg->node >= 0 && (size_t)lg->node < s->nnodes
                         ? str_of(s, s->node_name[lg->node]) : "";
  size_t hlen = 32, nfn = 0;
  for (size_t i = 0; i < s->nreg; i++)
    if (s->reg[i].func >= 0 && s->reg[i].func != FN_SWAPOUT) {
      hlen += strlen(str_of(s, s->reg[i].name)) + 1;
      nfn++;
    }
  size_t hostlen = strlen(host) + 1;
  hlen = (hlen + hostlen + 7) & ~(size_t)7;
  uint32_t h[6] = {1, (uint32_t)hlen, (uint32_t)lg->rank, (uint32_t)n, (uint32_t)nfn,
                   (uint32_t)hostlen};
  fwrite("TIERSTEV", 1, 8, lg->f);
  fwrite(h, 4, 6, lg->f);
  size_t at = 32;
  /* names in function id order (ids were given in region order) */
  for (size_t i = 0; i < s->nreg; i++)
    if (s->reg[i].func >= 0 && s->reg[i].func != FN_SWAPOUT) {
      const char *nm = str_of(s, s->reg[i].name);
      fwrite(nm, 1, strlen(nm) + 1, lg->f);
      at += strlen(nm) + 1;
    }
  fwrite(host, 1, hostlen, lg->f);
  at += hostlen;
  static const char zeros[8];
  fwrite(zeros, 1, hlen - at, lg->f);
  return 0;
}

/* the location group of member m of a communicator's COMM_GROUP (an index
 * into the archive's COMM_LOCATIONS group), or SIZE_MAX */
static size_t member_lg(const st_t *s, uint64_t m) {
  for (size_t i = 0; i < s->ngrp; i++)
    if (s->grp[i].locations) {
      if (m >= s->grp[i].n) return SIZE_MAX;
      uint64_t loc = s->grp[i].members[m];
      for (size_t k = 0; k < s->nloc; k++)
        if (s->loc[k].ref == loc) return (size_t)s->loc[k].group;
      return SIZE_MAX;
    }
  return (size_t)m; /* no COMM_LOCATIONS group: members are ranks */
}

/* the COMM (and NAME) records of every communicator rank lg->rank is in */
static void put_comms(st_t *s, size_t g) {
  s->cur = &s->lg[g];
  s->th = 0;
  for (size_t c = 0; c < s->ncomm; c++) {
    comm_t *cm = &s->comm[c];
    if (!cm->defined || cm->group >= s->ngrp) continue;
    group_t *gr = &s->grp[cm->group];
    int in = 0;
    if (gr->locations) continue;
    for (uint32_t m = 0; m < gr->n; m++)
      if (member_lg(s, gr->members[m]) == g) in = 1;
    if (!in) continue;
    size_t len = (16 + 16 + 4 * (size_t)gr->n + 7) & ~(size_t)7;
    put_head(s, K_COMM, 0, 0, len, 0);
    int32_t parent = cm->parent == OTF2_UNDEFINED_COMM ? -1 : cid_of(s, cm->parent);
    int32_t v[4] = {cid_of(s, c), parent, (int32_t)gr->n, 0};
    put_bytes(s, v, sizeof v);
    for (uint32_t m = 0; m < gr->n; m++) {
      size_t at = member_lg(s, gr->members[m]);
      int32_t w = at < s->nlg ? s->lg[at].rank : -1;
      put_bytes(s, &w, 4);
    }
    static const char zeros[8];
    put_bytes(s, zeros, len - 32 - 4 * (size_t)gr->n);
    /* a name the program gave (not one the post-processing made up) */
    const char *nm = str_of(s, cm->name);
    int made = !strcmp(nm, "MPI_COMM_WORLD") || !strcmp(nm, "MPI_COMM_SELF") ||
               !strncmp(nm, "MPI_Comm ", 9) || !*nm;
    if (!made) {
      size_t n = strlen(nm) > 255 ? 255 : strlen(nm);
      size_t nlen = (16 + 8 + n + 7) & ~(size_t)7;
      put_head(s, K_NAME, 0, 0, nlen, 0);
      int32_t x[2] = {cid_of(s, c), (int32_t)n};
      put_bytes(s, x, sizeof x);
      put_bytes(s, nm, n);
      put_bytes(s, zeros, nlen - 24 - n);
    }
  }
}

static int thread_of(const char *name) {
  int k;
  if (!strcmp(name, "Master thread")) return 0;
  if (sscanf(name, "Thread %d", &k) == 1 && k >= 0 && k < 65536) return k;
  return 0;
}

int tiers_post_from_otf2(const char *dir, const char *out) {
  st_t s;
  memset(&s, 0, sizeof s);
  char anchor[4200], rawdir[4200];
  snprintf(anchor, sizeof anchor, "%s/traces.otf2", dir);
  snprintf(rawdir, sizeof rawdir, "%s/raw", out);
  struct stat sb;
  if (stat(anchor, &sb) != 0) {
    fprintf(stderr, "tiers-trace-post: error: %s holds no OTF2 archive (traces.otf2)\n", dir);
    return 1;
  }
  if (mkdir(rawdir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "tiers-trace-post: error: cannot make %s: %s\n", rawdir, strerror(errno));
    return 1;
  }
  OTF2_Reader *rd = OTF2_Reader_Open(anchor);
  if (!rd) {
    fprintf(stderr, "tiers-trace-post: error: cannot read the OTF2 archive %s\n", anchor);
    return 1;
  }
  int rc = 1;
  OTF2_Reader_SetSerialCollectiveCallbacks(rd);
  OTF2_GlobalDefReader *gd = OTF2_Reader_GetGlobalDefReader(rd);
  OTF2_GlobalDefReaderCallbacks *gcb = OTF2_GlobalDefReaderCallbacks_New();
  OTF2_EvtReaderCallbacks *ecb = OTF2_EvtReaderCallbacks_New();
  if (!gd || !gcb || !ecb) {
    snprintf(s.why, sizeof s.why, "cannot read the definitions of %s", anchor);
    goto done;
  }
  OTF2_GlobalDefReaderCallbacks_SetStringCallback(gcb, d_string);
  OTF2_GlobalDefReaderCallbacks_SetSystemTreeNodeCallback(gcb, d_node);
  OTF2_GlobalDefReaderCallbacks_SetLocationGroupCallback(gcb, d_lgroup);
  OTF2_GlobalDefReaderCallbacks_SetLocationCallback(gcb, d_location);
  OTF2_GlobalDefReaderCallbacks_SetRegionCallback(gcb, d_region);
  OTF2_GlobalDefReaderCallbacks_SetGroupCallback(gcb, d_group);
  OTF2_GlobalDefReaderCallbacks_SetCommCallback(gcb, d_comm);
  OTF2_GlobalDefReaderCallbacks_SetAttributeCallback(gcb, d_attr);
  s.closed_attr = -1;
  OTF2_Reader_RegisterGlobalDefCallbacks(rd, gd, gcb, &s);
  uint64_t ndefs = 0;
  if (OTF2_Reader_ReadAllGlobalDefinitions(rd, gd, &ndefs) != OTF2_SUCCESS) {
    snprintf(s.why, sizeof s.why, "cannot read the definitions of %s", anchor);
    goto done;
  }
  OTF2_Reader_CloseGlobalDefReader(rd, gd);
  /* function ids: the MPI regions in region order; the tracer's own */
  int nfn = 0;
  for (size_t i = 0; i < s.nreg; i++) {
    const char *nm = str_of(&s, s.reg[i].name);
    s.reg[i].func = -1;
    if (!strcmp(nm, "tiers_swapout")) s.reg[i].func = FN_SWAPOUT;
    else if (!strcmp(nm, "tiers_swapout_unsynchronised")) {
      s.reg[i].func = FN_SWAPOUT;
      s.reg[i].unsync = 1;
    } else if (!strcmp(nm, "tiers_rank_stopped")) s.reg[i].stop = 1;
    else if (*nm) s.reg[i].func = nfn++;
  }
  int nranks = 0;
  for (size_t g = 0; g < s.nlg; g++) {
    int r;
    if (sscanf(str_of(&s, s.lg[g].name), "MPI Rank %d", &r) == 1 && r >= 0) {
      s.lg[g].rank = r;
      if (r + 1 > nranks) nranks = r + 1;
    }
  }
  if (!nranks) {
    snprintf(s.why, sizeof s.why, "%s has no MPI ranks (location groups 'MPI Rank r')", anchor);
    goto done;
  }
  for (size_t i = 0; i < s.nloc; i++) OTF2_Reader_SelectLocation(rd, s.loc[i].ref);
  if (OTF2_Reader_OpenEvtFiles(rd) != OTF2_SUCCESS) {
    snprintf(s.why, sizeof s.why, "cannot open the event files of %s", anchor);
    goto done;
  }
  /* the local definitions (mappings), where the archive has them */
  if (OTF2_Reader_OpenDefFiles(rd) == OTF2_SUCCESS) {
    for (size_t i = 0; i < s.nloc; i++) {
      OTF2_DefReader *dr = OTF2_Reader_GetDefReader(rd, s.loc[i].ref);
      if (!dr) continue;
      uint64_t nd = 0;
      OTF2_Reader_ReadAllLocalDefinitions(rd, dr, &nd);
      OTF2_Reader_CloseDefReader(rd, dr);
    }
    OTF2_Reader_CloseDefFiles(rd);
  }
  OTF2_EvtReaderCallbacks_SetEnterCallback(ecb, e_enter);
  OTF2_EvtReaderCallbacks_SetLeaveCallback(ecb, e_leave);
  OTF2_EvtReaderCallbacks_SetMpiSendCallback(ecb, e_send);
  OTF2_EvtReaderCallbacks_SetMpiRecvCallback(ecb, e_recv);
  OTF2_EvtReaderCallbacks_SetMpiIsendCallback(ecb, e_isend);
  OTF2_EvtReaderCallbacks_SetMpiIrecvCallback(ecb, e_irecv);
  OTF2_EvtReaderCallbacks_SetMpiIsendCompleteCallback(ecb, e_isend_done);
  OTF2_EvtReaderCallbacks_SetMpiIrecvRequestCallback(ecb, e_irecv_post);
  OTF2_EvtReaderCallbacks_SetMpiCollectiveBeginCallback(ecb, e_coll_begin);
  OTF2_EvtReaderCallbacks_SetMpiCollectiveEndCallback(ecb, e_coll_end);
  /* one rank at a time: its header and communicators, then each of its
   * locations' events, then its clock steps */
  for (size_t g = 0; g < s.nlg; g++) {
    if (s.lg[g].rank < 0) continue;
    if (open_rank(&s, out, g, nranks) < 0) goto done_evt;
    put_comms(&s, g);
    s.cur = &s.lg[g];
    for (size_t i = 0; i < s.nloc; i++) {
      if (s.loc[i].group != g) continue;
      s.th = (uint16_t)thread_of(str_of(&s, s.loc[i].name));
      OTF2_EvtReader *er = OTF2_Reader_GetEvtReader(rd, s.loc[i].ref);
      if (!er) {
        snprintf(s.why, sizeof s.why, "cannot read the events of location %" PRIu64,
                 s.loc[i].ref);
        goto done_evt;
      }
      OTF2_Reader_RegisterEvtCallbacks(rd, er, ecb, &s);
      uint64_t got = 0;
      OTF2_ErrorCode ec = OTF2_Reader_ReadLocalEvents(rd, er, OTF2_UNDEFINED_UINT64, &got);
      s.events += got;
      OTF2_Reader_CloseEvtReader(rd, er);
      if (ec != OTF2_SUCCESS) {
        snprintf(s.why, sizeof s.why, "cannot read the events of location %" PRIu64 ": %s",
                 s.loc[i].ref, OTF2_Error_GetDescription(ec));
        goto done_evt;
      }
    }
    s.th = 0;
    if (s.lg[g].first != INT64_MIN) {
      put_clock(&s, s.lg[g].first, 0);
      if (!s.lg[g].stopped) put_clock(&s, s.lg[g].last, 1);
    }
    int bad = ferror(s.lg[g].f);
    if (fclose(s.lg[g].f) != 0 || bad) {
      s.lg[g].f = NULL;
      snprintf(s.why, sizeof s.why, "cannot write rank %d's file in %s: %s", s.lg[g].rank,
               rawdir, strerror(errno));
      goto done_evt;
    }
    s.lg[g].f = NULL;
  }
  rc = 0;
  {
    /* what was done, and the peak memory it took (VmHWM) */
    long hwm = -1;
    FILE *st = fopen("/proc/self/status", "r");
    char line[256];
    while (st && fgets(line, sizeof line, st))
      if (!strncmp(line, "VmHWM:", 6)) hwm = strtol(line + 6, NULL, 10);
    if (st) fclose(st);
    printf("{\"ranks\": %d, \"events\": %" PRIu64 ", \"peak_rss_kib\": %ld}\n", nranks,
           s.events, hwm);
  }
done_evt:
  OTF2_Reader_CloseEvtFiles(rd);
done:
  if (rc && s.why[0]) fprintf(stderr, "tiers-trace-post: error: %s\n", s.why);
  for (size_t g = 0; g < s.nlg; g++)
    if (s.lg[g].f) fclose(s.lg[g].f);
  if (gcb) OTF2_GlobalDefReaderCallbacks_Delete(gcb);
  if (ecb) OTF2_EvtReaderCallbacks_Delete(ecb);
  OTF2_Reader_Close(rd);
  for (uint32_t i = 0; i < s.strs.n; i++) free(s.strs.s[i]);
  free(s.strs.s);
  for (size_t i = 0; i < s.ngrp; i++) free(s.grp[i].members);
  free(s.grp);
  free(s.node_name);
  free(s.lg);
  free(s.loc);
  free(s.reg);
  free(s.comm);
  return rc;
}
