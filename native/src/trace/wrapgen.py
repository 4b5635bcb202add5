#!/usr/bin/env python3
"""Generate native/src/trace/wrappers.c from mpi_functions.txt.

    python3 wrapgen.py            write wrappers.c next to this script
    python3 wrapgen.py --check    exit 1 (and say why) when wrappers.c differs
                                  from what the table gives
    python3 wrapgen.py --stdout   print the generated file

Every wrapper has the same shape: if tiers_trace_begin() refuses (tracing
off, or a call from inside another wrapper) it calls PMPI_ straight away;
otherwise it records what its KIND says (see the table's header), calls
PMPI_, records the outcome and calls tiers_trace_end().
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE = HERE / "mpi_functions.txt"
OUTPUT = HERE / "wrappers.c"


def parse_table(text: str) -> list[dict]:
    """Return the table's entries: kind, name, params (list of (type, name)), options."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        head = fields[0].split()
        if len(head) != 2 or len(fields) < 2:
            raise SystemExit(f"{TABLE.name}:{lineno}: expected 'KIND NAME | params [| opts]'")
        kind, name = head
        params = []
        if fields[1]:
            for p in fields[1].split(","):
                m = re.match(r"^(.*?)(\w+)(\[\])?$", p.strip())
                if not m:
                    raise SystemExit(f"{TABLE.name}:{lineno}: bad parameter '{p}'")
                params.append((m.group(1).strip(), m.group(2), bool(m.group(3))))
        opts = {}
        if len(fields) > 2 and fields[2]:
            for m in re.finditer(r"(\w+)=(\S+)", fields[2]):
                opts[m.group(1)] = m.group(2)
        out.append({"kind": kind, "name": name, "params": params, "opts": opts})
    return out


def decl(params) -> str:
    if not params:
        return "void"
    return ", ".join(f"{t} {n}{'[]' if arr else ''}" if not t.endswith("*") else f"{t}{n}{'[]' if arr else ''}"
                     for t, n, arr in params)


def call_args(params) -> str:
    return ", ".join(n for _, n, _ in params)


# Bytes of Alltoallw and of the neighbourhood collectives (their C helpers
# in trace.c): SUMW(counts,types) over the communicator; NOUT/NIN over the
# topology's destinations/sources with one count and type, the V forms with
# counts[] and one type, the W forms with counts[] and types[].
NBR_FORMS = {"NOUT": "1, {0}, {1}, NULL, NULL", "NOUTV": "1, 0, {1}, {0}, NULL",
             "NOUTW": "1, 0, MPI_DATATYPE_NULL, {0}, {1}", "NIN": "0, {0}, {1}, NULL, NULL",
             "NINV": "0, 0, {1}, {0}, NULL", "NINW": "0, 0, MPI_DATATYPE_NULL, {0}, {1}"}


def coll_expr(expr: str, comm: str) -> str:
    expr = re.sub(r"\bSUMW\((\w+),(\w+)\)", rf"tiers_trace_sumw(\1, \2, {comm})", expr)
    expr = re.sub(r"\b(NOUTV|NOUTW|NOUT|NINV|NINW|NIN)\((\w+),(\w+)\)",
                  lambda m: f"tiers_trace_nbr_bytes({comm}, "
                            f"{NBR_FORMS[m.group(1)].format(m.group(2), m.group(3))})", expr)
    expr = expr.replace("NP", "tiers_np_").replace("ME", "tiers_me_")
    expr = re.sub(r"\bTS\((\w+)\)", r"tiers_trace_type_size(\1)", expr)
    expr = re.sub(r"\bSUM\((\w+)\)", rf"tiers_trace_sum(\1, {comm})", expr)
    return expr



def nbr_args(o: dict) -> str:
    """The C arguments of a neighbourhood collective's send blocks (its
    table entry's nbr=count,type,counts,types)."""
    return ", ".join(o["nbr"].split(","))


def coll_code(o: dict, pre: list, post: list, nonblocking: bool = False,
              persistent: bool = False, req: str = "*request") -> None:
    """Append the code a collective's wrapper runs before and after the
    call (C and Fortran 2008 alike: both have the C communicator in
    `comm`): begin, the bytes sent and received, end with the root.  A
    persistent collective (``persistent``) records nothing itself: it hands
    operation, root and bytes to the tracer with its request, and each
    MPI_Start of the request records them."""
    comm = "comm"
    if not persistent:
        pre.append("  tiers_trace_coll_begin();")
    root = o["root"]
    uses = o["sent"] + o["recv"]
    if "NP" in uses or "SUM(" in uses:
        pre.append(f"  int tiers_np_ = tiers_trace_comm_size({comm});")
    if "ME" in uses:
        pre.append(f"  int tiers_me_ = tiers_trace_comm_rank({comm});")
    pre.append(f"  uint64_t tiers_sent_ = {coll_expr(o['sent'], comm)};")
    pre.append(f"  uint64_t tiers_recv_ = {coll_expr(o['recv'], comm)};")
    if "tiers_np_" in "".join(pre) and "tiers_np_" not in coll_expr(uses, comm):
        pre.append("  (void)tiers_np_;")
    root_c = root if root != '-' else 'OTF2_UNDEFINED_UINT32'
    if persistent:
        post.append(f"  if (rc == MPI_SUCCESS)\n    tiers_trace_pcoll_init(OTF2_COLLECTIVE_OP_{o['op']}, "
                    f"{comm}, {root_c}, tiers_sent_, tiers_recv_, {req});")
        if "nbr" in o:  # a neighbourhood collective's blocks, at each start
            post.append(f"  if (rc == MPI_SUCCESS)\n    tiers_trace_pcoll_nbr({req}, {comm}, {nbr_args(o)});")
        return
    end = "tiers_trace_icoll_end" if nonblocking else "tiers_trace_coll_end"
    post.append(f"  {end}(OTF2_COLLECTIVE_OP_{o['op']}, {comm}, "
                f"{root_c}, tiers_sent_, tiers_recv_);")

def reqs_code(kind: str, pre: list, post: list, f: str = "") -> None:
    """Append the code of MPI_Waitall/Testall/Waitsome/Testsome: save the
    requests (and a status array where the caller passed none) before the
    call, record the completed ones after it.  ``f`` is "" for the C
    wrapper, "f_" for the Fortran entry point (its arguments' names, its
    own save and done functions)."""
    count = "incount" if kind in ("waitsome", "testsome") else "count"
    save = f"  {f}array_of_statuses = tiers_trace_{'f' if f else ''}reqs_save(&tiers_sv_, {count}, " \
           f"{f}array_of_requests,"
    pre.append("  tiers_reqsave_t tiers_sv_;\n" + save + "\n" + " " * (save.index("(") + 1) +
               f"{f}array_of_statuses);")
    done = "(rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS)"
    if kind in ("waitall", "testall"):
        cond = done + (f" && *{f}flag" if kind == "testall" else "")
        post.append(f"  if ({cond})\n    tiers_trace_reqs_done(&tiers_sv_, count, NULL);\n"
                    "  tiers_trace_reqs_release(&tiers_sv_);")
    else:
        outcount = "(int)*f_outcount" if f else "*outcount"
        post.append(f"  if ({done} && *{f}outcount != MPI_UNDEFINED)\n"
                    f"    tiers_trace_{'f' if f else ''}reqs_done(&tiers_sv_, {outcount}, "
                    f"{f}array_of_indices);\n"
                    "  tiers_trace_reqs_release(&tiers_sv_);")


def extra_code(kind: str, o: dict, pre: list, post: list, req: str, reqs: str) -> bool:
    """Append the recording code of the kinds added for non-blocking
    collectives, persistent requests, one-sided and file calls and spawn;
    ``req`` is the C expression of the request made (``*request``),
    ``reqs`` that of the i-th request of an array.  Return False for other
    kinds."""
    if kind in ("ncoll", "incoll"):
        # a neighbourhood collective: the collective with its totals, and
        # one transfer per destination for the communication matrix
        coll_code(o, pre, post, nonblocking=kind == "incoll")
        post.insert(0, f"  if (rc == MPI_SUCCESS)\n    tiers_trace_nbr_xfer(comm, {nbr_args(o)});")
    elif kind == "icoll":
        coll_code(o, pre, post, nonblocking=True)
    elif kind == "pcoll":
        coll_code(o, pre, post, persistent=True, req=req)
    elif kind in ("send_init", "recv_init"):
        peer = "source" if kind == "recv_init" else "dest"
        post.append(f"  if (rc == MPI_SUCCESS)\n    tiers_trace_persist_init("
                    f"{1 if kind == 'recv_init' else 0}, {peer}, tag, comm, count, datatype, {req});")
    elif kind == "start":
        post.append(f"  if (rc == MPI_SUCCESS)\n    tiers_trace_start({req});")
    elif kind == "startall":
        post.append(f"  if (rc == MPI_SUCCESS)\n    for (int tiers_i_ = 0; tiers_i_ < count; tiers_i_++)\n"
                    f"      tiers_trace_start({reqs});")
    elif kind == "req_free":
        pre.append(f"  tiers_trace_request_free({req});")
    elif kind == "rma":
        post.append(f"  if (rc == MPI_SUCCESS)\n    tiers_trace_rma(TIERS_XFER_{o['what']}, win, "
                    f"{o['target']}, {coll_expr(o['bytes'], 'MPI_COMM_NULL')});")
    elif kind == "io":
        post.append(f"  if (rc == MPI_SUCCESS)\n    tiers_trace_io(TIERS_XFER_{o['what']}, "
                    f"{o.get('coll', '0')}, {coll_expr(o['bytes'], 'MPI_COMM_NULL')});")
    elif kind == "spawn":
        pre.append("  tiers_trace_spawn_refused();")
    elif kind == "comm_name":
        post.append("  if (rc == MPI_SUCCESS)\n    tiers_trace_comm_name(comm, comm_name);")
    elif kind == "comm_idup":
        post.append("  if (rc == MPI_SUCCESS)\n    tiers_trace_comm_idup(comm, newcomm, *request);")
    elif kind == "isendrecv":  # MPI-4: a send now, the receive posted with the request
        sc, st = o.get("sendcount", "sendcount"), o.get("sendtype", "sendtype")
        rcnt, rt = o.get("recvcount", "recvcount"), o.get("recvtype", "recvtype")
        pre.append(f"  tiers_trace_send(dest, sendtag, comm, {sc}, {st});")
        post.append(f"  if (rc == MPI_SUCCESS)\n    tiers_trace_recv_named(source, recvtag, comm, {rcnt}, {rt});")
    elif kind == "mprobe":
        cond = "rc == MPI_SUCCESS" + (" && *flag" if o.get("flag") == "1" else "")
        post.append(f"  if ({cond})\n    tiers_trace_message(*message, comm);")
    elif kind == "imrecv":
        pre.append("  MPI_Comm tiers_mc_ = tiers_trace_message_comm(*message);")
        post.append("  if (rc == MPI_SUCCESS && tiers_mc_ != MPI_COMM_NULL)\n"
                    "    tiers_trace_irecv(tiers_mc_, *request);")
    else:
        return False
    return True


def lifecycle_code(kind: str, fid: str, call: str, fortran: bool = False) -> list[str]:
    """Return the whole body of an MPI_Init, MPI_Init_thread, MPI_Finalize
    or MPI_Abort wrapper ([] for other kinds), CALL being the call of the
    MPI library's own function: the C wrapper returns its result, the
    Fortran entry point leaves it in *ierr.  MPI_Finalize always reaches
    the tracer (its last steps)."""
    run = call if fortran else f"int rc = {call}"
    tail = [] if fortran else ["  return rc;"]
    if kind in ("init", "init_thread"):
        provided = "MPI_THREAD_SINGLE"
        if kind == "init_thread":
            provided = "(int)*f_provided" if fortran else "*provided"
        return ["  int64_t tiers_t0_ = tiers_trace_clock();", f"  {run};",
                f"  if ({'*ierr' if fortran else 'rc'} == MPI_SUCCESS)",
                f"    tiers_trace_after_init({provided}, {fid}, tiers_t0_);", *tail]
    if kind == "finalize":
        return [f"  int tiers_on_ = tiers_trace_begin({fid}, __builtin_return_address(0));",
                "  tiers_trace_before_finalize();", f"  {run};",
                f"  tiers_trace_after_finalize({fid}, tiers_on_);", *tail]
    if kind == "abort":
        return [f"  if (tiers_trace_begin({fid}, __builtin_return_address(0)))",
                f"    tiers_trace_end({fid});", "  tiers_trace_at_abort();",
                f"  {call};" if fortran else f"  return {call};"]
    return []


def body(e: dict, fid: str) -> str:
    kind, name, params, o = e["kind"], e["name"], e["params"], e["opts"]
    args = call_args(params)
    pm = f"PMPI_{name}({args})"
    life = lifecycle_code(kind, fid, pm)
    if life:
        return "\n".join(life)
    lines = []
    w = lines.append
    w(f"  if (!tiers_trace_begin({fid}, __builtin_return_address(0)))")
    w(f"    return {pm};")
    pre, post = [], []
    status_fix = None
    if kind == "send":
        pre.append("  tiers_trace_send(dest, tag, comm, count, datatype);")
    elif kind == "recv":
        status_fix = "status"
        post.append("  if (rc == MPI_SUCCESS)\n    tiers_trace_recv(status, comm);")
    elif kind == "isend":
        post.append("  if (rc == MPI_SUCCESS)\n"
                    "    tiers_trace_isend(dest, tag, comm, count, datatype, *request);")
    elif kind == "irecv":
        post.append("  if (rc == MPI_SUCCESS)\n    tiers_trace_irecv(comm, *request);")
    elif kind == "sendrecv":
        status_fix = "status"
        sc, st = o.get("sendcount", "sendcount"), o.get("sendtype", "sendtype")
        pre.append(f"  tiers_trace_send(dest, sendtag, comm, {sc}, {st});")
        post.append("  if (rc == MPI_SUCCESS)\n    tiers_trace_recv(status, comm);")
    elif kind in ("wait", "test"):
        status_fix = "status"
        pre.append("  MPI_Request tiers_saved_ = *request;")
        cond = "rc == MPI_SUCCESS" + (" && *flag" if kind == "test" else "")
        post.append(f"  if ({cond})\n    tiers_trace_complete(tiers_saved_, status);")
    elif kind in ("waitany", "testany"):
        status_fix = "status"
        pre.append("  tiers_reqsave_t tiers_sv_;\n"
                   "  tiers_trace_reqs_save(&tiers_sv_, count, array_of_requests, NULL);")
        cond = "rc == MPI_SUCCESS && *index != MPI_UNDEFINED" + (" && *flag" if kind == "testany" else "")
        post.append(f"  if ({cond})\n    tiers_trace_complete(tiers_sv_.req[*index], status);\n"
                    "  tiers_trace_reqs_release(&tiers_sv_);")
    elif kind in ("waitall", "testall", "waitsome", "testsome"):
        reqs_code(kind, pre, post)
    elif kind == "coll":
        coll_code(o, pre, post)
    elif kind == "comm_new":
        out = o["out"]
        parent = o.get("parent", params[0][1])
        post.append(f"  if (rc == MPI_SUCCESS && *{out} != MPI_COMM_NULL)\n"
                    f"    tiers_trace_comm_new({parent}, *{out});")
    elif kind == "comm_free":
        pre.append("  tiers_trace_comm_free(*comm);")
    elif kind == "mrecv":  # the message's communicator, kept at its probe
        status_fix = "status"
        pre.append("  MPI_Comm tiers_mc_ = tiers_trace_message_comm(*message);")
        post.append("  if (rc == MPI_SUCCESS && tiers_mc_ != MPI_COMM_NULL)\n"
                    "    tiers_trace_recv(status, tiers_mc_);")
    elif kind == "plain":
        pass
    elif extra_code(kind, o, pre, post, "*request", "array_of_requests[tiers_i_]"):
        pass
    else:
        raise SystemExit(f"{TABLE.name}: unknown kind '{kind}' for {name}")
    if status_fix:
        pre.insert(0, f"  MPI_Status tiers_status_;\n  if ({status_fix} == MPI_STATUS_IGNORE)\n"
                      f"    {status_fix} = &tiers_status_;")
    lines += pre
    w(f"  int rc = {pm};")
    lines += post
    w(f"  tiers_trace_end({fid});")
    w("  return rc;")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Fortran: the mpif.h / `use mpi` bindings (Open MPI's libmpi_mpifh, MPICH's
# libmpifort) call PMPI_ in C directly, so the C wrappers above never see a
# Fortran call.  Each table entry also gets a Fortran entry point under the
# four usual manglings (mpi_send_, mpi_send__, mpi_send, MPI_SEND: one
# function and three aliases) that records through the same runtime and
# calls the Fortran library's own pmpi_send_ (found with dlsym when first
# used).  Arguments arrive by reference; handles are converted with
# PMPI_*_f2c only when the call is recorded.

FORTRAN_MANGLINGS = ("{l}__", "{l}", "{u}")   # aliases of {l}_

# F08_NOTE: the `use mpi_f08` module (Open MPI's libmpi_usempif08, built
# without subarray support, MPI_SUBARRAYS_SUPPORTED = .false.) turns
# MPI_Send into the external procedure mpi_send_f08_, which calls the
# mpif.h binding's internal ompi_send_f and from there PMPI_Send in C: no
# wrapper above sees it.  Its arguments are those of mpi_send_ (buffers as
# plain addresses; handles are TYPE(MPI_Comm) etc., one INTEGER each, so a
# pointer to MPI_Fint; TYPE(MPI_Status) has the layout of the integer
# status array; MPI_STATUS_IGNORE and MPI_IN_PLACE are the same common
# blocks), except that ierror is OPTIONAL and arrives as NULL when left
# out.  So mpi_send_f08_ is generated as a call to the mpi_send_ entry
# point with a local ierror, and records the same events.


# Per MPI: does the tracer need its own Fortran entry points?  Chosen when
# wrappers.c is compiled, from the macros of the mpi.h it is compiled with
# (CMake's TIERS_MPI picks that mpi.h).
#
# - Open MPI: libmpi_mpifh's mpi_send_ and libmpi_usempif08's mpi_send_f08_
#   call PMPI_Send in C (F08_NOTE): the tracer exports its own entry points.
# - MPICH (4.0, libmpichfort): mpif.h's mpi_send_ (an alias of pmpi_send_)
#   and the mpi_f08 procedures with a choice buffer (mpi_send_f08ts_) call
#   MPI_Send & co. in C, so the C wrappers above record them, once, after
#   MPICH's own Fortran layer has converted MPI_STATUS_IGNORE, MPI_IN_PLACE
#   and the rest: the tracer has no mpi_send_ of its own there.  The mpi_f08
#   procedures without one (mpi_barrier_f08_, mpi_wait_f08_, mpi_init_f08_,
#   mpi_finalize_f08_...) call PMPI_ in C instead; the tracer's
#   mpi_barrier_f08_ hands the call to MPICH's mpif.h binding (pmpi_barrier_,
#   which calls MPI_Barrier: recorded by the C wrapper), after turning the
#   f08 module's MPI_STATUS(ES)_IGNORE objects into mpif.h's and a left-out
#   ierror into a local one.  Handles (TYPE(MPI_Comm)...: one INTEGER) and
#   TYPE(MPI_Status) (5 INTEGERs, as mpif.h's status array) need nothing.
# Any other MPI gets Open MPI's entry points.
FORTRAN_ENTRIES_BY_MPI = (
    ("defined(MPICH)", "mpich"),
    ("defined(OPEN_MPI)", "openmpi"),
)


def fortran_guard() -> list[str]:
    """Return the preprocessor lines that set TIERS_FORTRAN_ENTRIES per MPI
    (1: the Open MPI entry points, 2: the MPICH mpi_f08 forwarders)."""
    code = {"openmpi": 1, "mpich": 2}
    out = []
    for i, (cond, kind) in enumerate(FORTRAN_ENTRIES_BY_MPI):
        out.append(f"#{'if' if i == 0 else 'elif'} {cond}")
        out.append(f"#define TIERS_FORTRAN_ENTRIES {code[kind]}")
    out += ["#else", "#define TIERS_FORTRAN_ENTRIES 1", "#endif"]
    return out


def freal_lookup(name: str, then: list[str] = ()) -> list[str]:
    """Return the lines that find the Fortran library's own pmpi_NAME_
    (tiers_real_, looked up once), then THEN, then return MPI_ERR_INTERN in
    *ierr when there is none."""
    return ["  static void *tiers_slot_;",
            f"  tiers_ft_{name} tiers_real_ = (tiers_ft_{name})tiers_trace_freal(&tiers_slot_, "
            f"\"pmpi_{name.lower()}\");",
            *then, "  if (!tiers_real_) {", "    *ierr = MPI_ERR_INTERN;", "    return;", "  }"]


def generate_mpich_f08(entries: list[dict]) -> list[str]:
    """Return the MPICH mpi_f08 forwarders (see FORTRAN_ENTRIES_BY_MPI)."""
    out = ["#elif TIERS_FORTRAN_ENTRIES == 2",
           "/* the mpi_f08 module's MPI_STATUS(ES)_IGNORE become mpif.h's (MPI-4 names) */",
           "static MPI_Fint *tiers_f08_status_(MPI_Fint *st, int many)",
           "{",
           "  if (st != NULL && ((void *)st == (void *)MPI_F08_STATUS_IGNORE ||",
           "                     (void *)st == (void *)MPI_F08_STATUSES_IGNORE))",
           "    return many ? MPI_F_STATUSES_IGNORE : MPI_F_STATUS_IGNORE;",
           "  return st;",
           "}"]
    for e in entries:
        name = e["name"]
        fps = fparams(e["params"])
        low = f"mpi_{name.lower()}"
        many = {f"f_{n}": ("1" if arr or "statuses" in n else "0")
                for t, n, arr in e["params"] if "MPI_Status" in t}
        args = [f"tiers_f08_status_({n}, {many[n]})" if n in many else n for _, n in fps]
        out.append("")
        out.append(ftypedef(name, fps))
        out.append(f"TIERS_EXPORT void {low}_f08_({fdecl(fps)});")
        out.append(f"void {low}_f08_({fdecl(fps)})")
        out.append("{")
        out += freal_lookup(name, ["  MPI_Fint tiers_ierr_;", "  if (!ierr)", "    ierr = &tiers_ierr_;"])
        out.append(f"  tiers_real_({', '.join(args)});")
        out.append("}")
    return out


def fparams(params) -> list[tuple[str, str]]:
    """Return the Fortran entry point's parameters as (C type, name): every
    argument by reference, argc/argv dropped, ierr appended, then the hidden
    length of each CHARACTER argument (gfortran passes them by value, as
    size_t, after all the others)."""
    out, lengths = [], []
    for t, n, _arr in params:
        if n in ("argc", "argv"):
            continue
        if "void" in t:
            out.append((t if t.endswith("*") else t + " *", f"f_{n}"))
        elif "char" in t:
            out.append(("char *", f"f_{n}"))
            lengths.append(("size_t ", f"f_{n}_len"))
        else:
            out.append(("MPI_Fint *", f"f_{n}"))
    out.append(("MPI_Fint *", "ierr"))
    return out + lengths


def fdecl(fps) -> str:
    return ", ".join(f"{t}{n}" for t, n in fps)


def flocals(params, code: str, nbr: bool = False) -> list[str]:
    """C-typed copies of the input arguments that the recording code uses,
    under their C names (so the table's sent=/recv= formulas apply as they are)."""
    out = []
    for t, n, arr in params:
        if not re.search(rf"\b{n}\b", code):
            continue
        if "void" in t:
            out.append(f"  const void *{n} = tiers_trace_fbuf(f_{n});")
        elif "char" in t and not arr:
            out.append(f"  char {n}[1024];\n"
                       f"  tiers_trace_fstring({n}, sizeof {n}, f_{n}, f_{n}_len);")
        elif t in ("int", "const int") and not arr:
            out.append(f"  int {n} = (int)*f_{n};")
        elif arr and "int" in t:
            out.append(f"  const int *{n} = (const int *)f_{n};")
        elif t == "MPI_Datatype":
            out.append(f"  MPI_Datatype {n} = PMPI_Type_f2c(*f_{n});")
        elif t == "MPI_Comm":
            out.append(f"  MPI_Comm {n} = PMPI_Comm_f2c(*f_{n});")
        elif t == "MPI_Win":
            out.append(f"  MPI_Win {n} = PMPI_Win_f2c(*f_{n});")
    # datatype arrays (Alltoallw & co.): converted once the communicator is
    # known, freed by fbody; as many as the communicator's size or, for a
    # neighbourhood collective, its destinations (sendtypes) or sources
    for t, n, arr in params:
        if arr and "MPI_Datatype" in t and re.search(rf"\b{n}\b", code):
            which = 0 if not nbr else (1 if n.startswith("send") else 2)
            out.append(f"  MPI_Datatype *{n} = tiers_trace_ftypes(f_{n}, comm, {which});")
    return out


# A Fortran status argument: a local one where the caller passed
# MPI_STATUS_IGNORE (the recording needs it), and its C form for the
# recording CALL once the call succeeded (COND).
FSTATUS_LOCAL = ("  MPI_Fint tiers_fst_[TIERS_FSTATUS_MAX];\n"
                 "  if (tiers_trace_fstatus_ignore(f_status))\n    f_status = tiers_fst_;")


def fstatus_record(cond: str, call: str) -> str:
    return (f"  if ({cond}) {{\n    MPI_Status tiers_cst_;\n"
            f"    PMPI_Status_f2c(f_status, &tiers_cst_);\n    {call};\n  }}")


def fbody(e: dict, fid: str) -> str:
    """Return the body of the Fortran entry point of table entry ``e``."""
    kind, name, params, o = e["kind"], e["name"], e["params"], e["opts"]
    fps = fparams(params)
    real = f"tiers_real_({', '.join(n for _, n in fps)})"
    lines = freal_lookup(name)
    life = lifecycle_code(kind, fid, real, fortran=True)
    if life:
        return "\n".join(lines + life)
    w = lines.append
    w(f"  if (!tiers_trace_begin({fid}, __builtin_return_address(0))) {{")
    w(f"    {real};")
    w("    return;")
    w("  }")
    pre, post = [], []
    if kind == "send":
        pre.append("  tiers_trace_send(dest, tag, comm, count, datatype);")
    elif kind == "recv":
        pre.append(FSTATUS_LOCAL)
        post.append(fstatus_record("rc == MPI_SUCCESS", "tiers_trace_recv(&tiers_cst_, comm)"))
    elif kind == "isend":
        post.append("  if (rc == MPI_SUCCESS)\n"
                    "    tiers_trace_isend(dest, tag, comm, count, datatype, "
                    "PMPI_Request_f2c(*f_request));")
    elif kind == "irecv":
        post.append("  if (rc == MPI_SUCCESS)\n    tiers_trace_irecv(comm, PMPI_Request_f2c(*f_request));")
    elif kind == "sendrecv":
        sc, st = o.get("sendcount", "sendcount"), o.get("sendtype", "sendtype")
        pre.append(f"  tiers_trace_send(dest, sendtag, comm, {sc}, {st});")
        pre.append(FSTATUS_LOCAL)
        post.append(fstatus_record("rc == MPI_SUCCESS", "tiers_trace_recv(&tiers_cst_, comm)"))
    elif kind in ("wait", "test"):
        pre.append("  MPI_Request tiers_saved_ = PMPI_Request_f2c(*f_request);")
        pre.append(FSTATUS_LOCAL)
        cond = "rc == MPI_SUCCESS" + (" && *f_flag" if kind == "test" else "")
        post.append(fstatus_record(cond, "tiers_trace_complete(tiers_saved_, &tiers_cst_)"))
    elif kind in ("waitany", "testany"):
        pre.append("  tiers_reqsave_t tiers_sv_;\n"
                   "  tiers_trace_freqs_save(&tiers_sv_, count, f_array_of_requests, NULL);")
        pre.append(FSTATUS_LOCAL)
        cond = "rc == MPI_SUCCESS && *f_index != MPI_UNDEFINED" + (" && *f_flag" if kind == "testany" else "")
        post.append(f"  if ({cond}) {{\n"
                    "    tiers_sv_.fst = f_status;\n"
                    "    int tiers_i_ = (int)*f_index - 1; /* Fortran counts from 1 */\n"
                    "    tiers_trace_reqs_done(&tiers_sv_, 1, &tiers_i_);\n  }\n"
                    "  tiers_trace_reqs_release(&tiers_sv_);")
    elif kind in ("waitall", "testall", "waitsome", "testsome"):
        reqs_code(kind, pre, post, f="f_")
    elif kind == "coll":
        coll_code(o, pre, post)
    elif kind == "comm_new":
        out = o["out"]
        parent = o.get("parent", params[0][1])
        post.append(f"  if (rc == MPI_SUCCESS) {{\n"
                    f"    MPI_Comm tiers_new_ = PMPI_Comm_f2c(*f_{out});\n"
                    f"    if (tiers_new_ != MPI_COMM_NULL)\n"
                    f"      tiers_trace_comm_new({parent}, tiers_new_);\n  }}")
    elif kind == "comm_free":
        pre.append("  tiers_trace_comm_free(PMPI_Comm_f2c(*f_comm));")
    elif kind == "req_free":
        pre.append("  tiers_trace_request_free(PMPI_Request_f2c(*f_request));")
    elif kind == "mprobe":
        cond = "rc == MPI_SUCCESS" + (" && *f_flag" if o.get("flag") == "1" else "")
        post.append(f"  if ({cond})\n    tiers_trace_message(PMPI_Message_f2c(*f_message), comm);")
    elif kind in ("mrecv", "imrecv"):
        # the message's communicator, taken before the call frees the handle
        pre.append("  MPI_Comm tiers_mc_ = tiers_trace_message_comm(PMPI_Message_f2c(*f_message));")
        if kind == "imrecv":
            post.append("  if (rc == MPI_SUCCESS && tiers_mc_ != MPI_COMM_NULL)\n"
                        "    tiers_trace_irecv(tiers_mc_, PMPI_Request_f2c(*f_request));")
        else:
            pre.append(FSTATUS_LOCAL)
            post.append(fstatus_record("rc == MPI_SUCCESS && tiers_mc_ != MPI_COMM_NULL",
                                       "tiers_trace_recv(&tiers_cst_, tiers_mc_)"))
    elif kind == "comm_idup":
        # the new communicator's Fortran handle is read when the request
        # completes (its C handle is not usable before)
        post.append("  if (rc == MPI_SUCCESS)\n    tiers_trace_fcomm_idup(comm, f_newcomm, "
                    "PMPI_Request_f2c(*f_request));")
    elif extra_code(kind, o, pre, post, "PMPI_Request_f2c(*f_request)",
                    "PMPI_Request_f2c(f_array_of_requests[tiers_i_])"):
        pass
    elif kind != "plain":
        raise SystemExit(f"{TABLE.name}: unknown kind '{kind}' for {name}")
    code = "\n".join(pre + post)
    lines += flocals(params, code, nbr="nbr" in o)
    frees = [n for t, n, arr in params
             if arr and "MPI_Datatype" in t and re.search(rf"\b{n}\b", code)]
    post += [f"  tiers_trace_ffree({n});" for n in frees]
    lines += pre
    w(f"  {real};")
    w("  int rc = (int)*ierr;")
    if not re.search(r"\brc\b", "\n".join(post)):
        w("  (void)rc;")
    lines += post
    w(f"  tiers_trace_end({fid});")
    return "\n".join(lines)


def ftypedef(name: str, fps) -> str:
    """The type of the Fortran library's own entry point for NAME."""
    return f"typedef void (*tiers_ft_{name})({', '.join(t.strip() for t, _ in fps)});"


def fortran_entry(name: str, fps, low: str, up: str, code: str) -> list[str]:
    """Return the lines of one Fortran entry point: LOW_ running CODE, its
    other manglings as aliases, and the mpi_f08 module's LOW_f08_, which
    calls LOW_ (see F08_NOTE).  With CHARACTER arguments LOW_f08_ has the
    mpif.h one's too: Open MPI's mpi_comm_set_name_f08_(comm, name, ierror,
    name_len) passes the hidden lengths on to ompi_comm_set_name_f after
    the optional ierror (checked with objdump on libmpi_usempif08.so)."""
    out = ["", ftypedef(name, fps), f"TIERS_EXPORT void {low}_({fdecl(fps)});"]
    for m in FORTRAN_MANGLINGS:
        out.append(f"TIERS_EXPORT void {m.format(l=low, u=up)}({fdecl(fps)}) "
                   f"__attribute__((alias(\"{low}_\")));")
    fargs = ["ierr ? ierr : &tiers_ierr_" if n == "ierr" else n for _, n in fps]
    out += [f"void {low}_({fdecl(fps)})", "{", code, "}",
            f"TIERS_EXPORT void {low}_f08_({fdecl(fps)});", f"void {low}_f08_({fdecl(fps)})", "{",
            "  MPI_Fint tiers_ierr_;", f"  {low}_({', '.join(fargs)});", "}"]
    return out


def generate_fortran_pcoll(entries: list[dict]) -> list[str]:
    """Return Open MPI's Fortran persistent collectives: mpix_barrier_init_
    (mpif.h, `use mpi` with `use mpi_ext`) calls PMPIX_Barrier_init in C, and
    mpix_barrier_init_f08_ (`use mpi_f08_ext`) goes the same way, so the
    tracer has entry points of its own for them, recorded under the MPI-4
    name; they call the binding's pmpix_barrier_init_."""
    out = ["", "#if defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)"]
    for e in entries:
        name = e["name"]
        fps = fparams(e["params"])
        low, up = f"mpix_{name.lower()}", f"MPIX_{name.upper()}"
        code = fbody(e, f"TIERS_FN_{name}").replace(f'"pmpi_{name.lower()}"',
                                                    f'"pmpix_{name.lower()}"')
        out += fortran_entry(name, fps, low, up, code)
    out.append("#endif /* OMPI_HAVE_MPI_EXT_PCOLLREQ */")
    return out


def generate_fortran(entries: list[dict]) -> list[str]:
    """Return the lines of the Fortran entry points (appended to wrappers.c)."""
    out = ["", "/* ------------------------------------------------------------------ */",
           "/* Fortran entry points (mpif.h and `use mpi`), see wrapgen.py */",
           *fortran_guard(), "#if TIERS_FORTRAN_ENTRIES == 1"]
    # nofortran=1: left to the Fortran library (an array of strings, or a
    # handle the Fortran side writes later)
    pcoll = [e for e in entries if e["kind"] == "pcoll"]
    entries = [e for e in entries if e["opts"].get("nofortran") != "1" and e["kind"] != "pcoll"]
    for e in entries:
        name = e["name"]
        fps = fparams(e["params"])
        low, up = f"mpi_{name.lower()}", f"MPI_{name.upper()}"
        out += fortran_entry(name, fps, low, up, fbody(e, f"TIERS_FN_{name}"))
    # MPICH's mpi_f08 procedures with CHARACTER arguments have the mpif.h
    # ones' arguments too (mpi_comm_set_name_f08_(comm, name, ierror,
    # name_len), checked with objdump on libmpichfort.so) and call PMPI_ in
    # C; MPI_Comm_spawn's (an array of strings) is left to MPICH
    out += generate_fortran_pcoll(pcoll)
    out += generate_mpich_f08([e for e in entries if e["kind"] != "spawn"])
    out.append("#endif /* TIERS_FORTRAN_ENTRIES */")
    return out


# Persistent collectives exist under two names: MPI-4's MPI_Barrier_init
# (MPICH 4.0: mpi.h says MPI_VERSION 4) and Open MPI 4.1's extension
# MPIX_Barrier_init (mpi-ext.h, OMPI_HAVE_MPI_EXT_PCOLLREQ).  A wrapper is
# compiled for each name the mpi.h in use declares, both recorded under the
# MPI-4 name; where neither is declared there is none (the table's names
# stay, unused).
PCOLL_PREFIXES = (("MPI_VERSION >= 4", "MPI"),
                  ("defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)", "MPIX"))


def generate_pcoll(entries: list[dict]) -> list[str]:
    """Return the wrappers of the persistent collectives, one per name the
    MPI declares (PCOLL_PREFIXES)."""
    out = ["", "/* Persistent collectives (see wrapgen.py, PCOLL_PREFIXES) */",
           "#if defined(OPEN_MPI) && !defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)",
           "#include <mpi-ext.h>", "#endif"]
    for cond, prefix in PCOLL_PREFIXES:
        out.append(f"#if {cond}")
        for e in entries:
            name = e["name"]
            code = body(e, f"TIERS_FN_{name}").replace(f"PMPI_{name}(", f"P{prefix}_{name}(")
            out.append("")
            out.append(f"TIERS_EXPORT int {prefix}_{name}({decl(e['params'])});")
            out.append(f"int {prefix}_{name}({decl(e['params'])})")
            out.append("{")
            out.append(code)
            out.append("}")
        out.append(f"#endif /* {cond} */")
    return out


def generate(entries: list[dict]) -> str:
    """Return the text of wrappers.c for the table's entries."""
    out = ["/* Generated by native/src/trace/wrapgen.py from mpi_functions.txt: do not edit. */",
           "#include <mpi.h>", "#include <stddef.h>", "#include <stdint.h>",
           "#include <otf2/OTF2_Events.h>", "", '#include "tracer.h"', "",
           "enum {"]
    for i, e in enumerate(entries):
        out.append(f"  TIERS_FN_{e['name']} = {i},")
    out.append("};")
    out.append("")
    out.append("const char *const tiers_trace_fn_names[] = {")
    for e in entries:
        out.append(f'  "MPI_{e["name"]}",')
    out.append("};")
    out.append(f"const int tiers_trace_fn_count = {len(entries)};")
    for e in entries:
        if e["kind"] == "pcoll":
            continue
        out.append("")
        if e["opts"].get("mpi4") == "1":  # MPI-4 only: where mpi.h declares it
            out.append("#if MPI_VERSION >= 4")
        out.append(f"TIERS_EXPORT int MPI_{e['name']}({decl(e['params'])})")
        out.append("{")
        out.append(body(e, f"TIERS_FN_{e['name']}"))
        out.append("}")
        if e["opts"].get("mpi4") == "1":
            out.append("#endif")
    out += generate_pcoll([e for e in entries if e["kind"] == "pcoll"])
    out += generate_fortran(entries)
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = generate(parse_table(TABLE.read_text(encoding="utf-8")))
    if "--stdout" in argv:
        sys.stdout.write(text)
        return 0
    if "--check" in argv:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is out of date: run python3 {Path(__file__).name} "
                  "and commit the result", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
