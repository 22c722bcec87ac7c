"""glibc 2.28 for what descl builds on Debian 11 (glibc 2.31): one policy, one ELF patcher, two
modes (scripts/wheel-glibc228 and scripts/bundle-glibc228 run it).

    python patch.py wheel IN.whl OUT_DIR POLYFILL.so PATCHELF       prints the new wheel's path
    python patch.py bundle IN.tar.gz OUT_DIR POLYFILL.so PATCHELF   prints the new tarball's path

Every ELF file is checked for symbol references newer than manylinux_2_28 allows (GLIBC_2.28,
GLIBCXX_3.4.24, CXXABI_1.3.11, GCC_7.0.0) and each is handled, or the script fails:

- libm's exp/log/pow/log2@GLIBC_2.29 are re-pointed to @GLIBC_2.2.5 (the same functions behind
  the errno wrapper), an index of the file's existing libm.so.6 GLIBC_2.2.5 requirement;
- gettid and pthread_cond_clockwait@GLIBC_2.30 and libstdc++'s default basic_stringstream /
  basic_ostringstream constructors @GLIBCXX_3.4.26 are renamed (patchelf
  --rename-dynamic-symbols) to the descl_glibc228_ functions of POLYFILL.so and made
  unversioned, and POLYFILL.so is added as DT_NEEDED (patchelf --add-needed) and beside the
  other libraries (the wheel's descl.libs/, the bundle's lib/);
- posix_spawn_file_actions_addchdir_np@GLIBC_2.29, a weak reference of Rust's std that it checks
  for null (and then spawns with fork/exec), is made unversioned: the loader binds it to glibc's
  only definition where there is one (>= 2.29) and leaves it null on 2.28;
- the version requirements no symbol uses any more are unlinked from .gnu.version_r, so that
  nothing asks the loader (or auditwheel) for them.

wheel: the new wheel is tagged manylinux_2_28_x86_64 (WHEEL's Tag, the file name) with a fresh
RECORD. bundle (scripts/bundle's tarball: <name>/bin/descl, <name>/lib/, ...): references to a
library the bundle ships in lib/ (its libstdc++.so.6 and libgcc_s.so.1 among them) are met by
that library, so only need a version it defines (GLIBCXX_3.4.26 is fine when lib/libstdc++.so.6
defines it); the limits above hold for the others (glibc's). README.txt's "(glibc X or newer)"
gets the new floor; the tarball keeps its name. Needs pyelftools (auditwheel's dependency).
"""
import base64
import gzip
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from elftools.elf.elffile import ELFFile

POLYFILL_SONAME = "libdescl_glibc228.so"
PLATFORM = "manylinux_2_28_x86_64"
# The newest version of each family manylinux_2_28 allows (auditwheel's policy).
LIMITS = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 24), "CXXABI": (1, 3, 11), "GCC": (7, 0, 0)}
REPOINT = {("libm.so.6", "GLIBC_2.29", s): "GLIBC_2.2.5" for s in ("exp", "log", "pow", "log2")}
RENAME = {
    ("GLIBC_2.30", "gettid"): "descl_glibc228_gettid",
    ("GLIBC_2.30", "pthread_cond_clockwait"): "descl_glibc228_pthread_cond_clockwait",
    ("GLIBCXX_3.4.26", "_ZNSt7__cxx1118basic_stringstreamIcSt11char_traitsIcESaIcEEC1Ev"):
        "descl_glibc228_stringstream_ctor",
    ("GLIBCXX_3.4.26", "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev"):
        "descl_glibc228_ostringstream_ctor",
}
# Weak references only (checked): unversioned, they bind where glibc has them and are null where not.
UNVERSION_WEAK = {("libc.so.6", "GLIBC_2.29", "posix_spawn_file_actions_addchdir_np")}
STB_WEAK = 2


def die(msg):
    sys.exit(f"glibc228/patch.py: FAIL: {msg}")


def too_new(version):
    m = re.fullmatch(r"([A-Z]+)_([0-9.]+)", version)
    if not m or m.group(1) not in LIMITS:
        return False
    return tuple(int(x) for x in m.group(2).split(".")) > LIMITS[m.group(1)]


class Policy:
    """What a reference may ask for: the limits, except of a library shipped beside the files
    (SHIPPED: its soname -> the versions it defines), which meets what it defines."""

    def __init__(self, shipped=None):
        self.shipped = shipped or {}

    def forbidden(self, vfile, vname, rel):
        if vfile in self.shipped:
            if vname not in self.shipped[vfile]:
                die(f"{rel}: needs {vname} of {vfile}, which the shipped {vfile} does not define")
            return False
        return too_new(vname)


class Elf:
    """The dynamic symbols of an ELF64 little-endian file with their version requirements."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.data = bytearray(f.read())
        self.needs = {}
        self.defines = set()
        self.dynamic = {}
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if elf.elfclass != 64 or not elf.little_endian:
                die(f"{path}: not ELF64 little-endian")
            self.dynsym = elf.get_section_by_name(".dynsym")
            versym = elf.get_section_by_name(".gnu.version")
            verneed = elf.get_section_by_name(".gnu.version_r")
            verdef = elf.get_section_by_name(".gnu.version_d")
            dynamic = elf.get_section_by_name(".dynamic")
            if dynamic is not None:
                for tag in dynamic.iter_tags():
                    for key in ("soname", "needed", "rpath", "runpath"):
                        if hasattr(tag, key):
                            self.dynamic.setdefault(tag.entry.d_tag, []).append(getattr(tag, key))
            if verdef is not None:
                for _vd, auxs in verdef.iter_versions():
                    self.defines.add(next(iter(auxs)).name)
            if self.dynsym is None:
                self.syms = []
                return
            dynstr = elf.get_section(self.dynsym["sh_link"])
            self.versym_off = versym["sh_offset"] if versym else None
            self.verneed_off = verneed["sh_offset"] if verneed else None
            self.verneed_num = verneed["sh_info"] if verneed else 0
            self.dynstr_off = dynstr["sh_offset"]
            # (name, undefined, version index, binding) per dynamic symbol
            self.syms = []
            off, n = self.dynsym["sh_offset"], self.dynsym["sh_size"] // 24
            for i in range(n):
                st_name, info, _other, shndx = struct.unpack_from("<IBBH", self.data, off + 24 * i)
                ver = (struct.unpack_from("<H", self.data, self.versym_off + 2 * i)[0]
                       if self.versym_off is not None else 1)
                self.syms.append((self.string(st_name), shndx == 0, ver, info >> 4))
        # version index -> (file, version name, aux offset, verneed offset)
        if self.verneed_off is None:
            return
        vn = self.verneed_off
        for _ in range(self.verneed_num):
            _v, cnt, vfile, vaux, vnext = struct.unpack_from("<HHIII", self.data, vn)
            aux = vn + vaux
            for _ in range(cnt):
                _h, _fl, other, name, anext = struct.unpack_from("<IHHII", self.data, aux)
                self.needs[other & 0x7FFF] = (self.string(vfile), self.string(name), aux, vn)
                aux += anext
            if vnext == 0:
                break
            vn += vnext

    def string(self, off):
        start = self.dynstr_off + off
        return self.data[start:self.data.index(b"\0", start)].decode()

    def refs(self):
        """(symbol index, name, file, version, binding) of each versioned undefined symbol."""
        for i, (name, undef, ver, bind) in enumerate(self.syms):
            if undef and (ver & 0x7FFF) >= 2 and (ver & 0x7FFF) in self.needs:
                vfile, vname = self.needs[ver & 0x7FFF][:2]
                yield i, name, vfile, vname, bind

    def soname(self):
        return (self.dynamic.get("DT_SONAME") or [os.path.basename(self.path)])[0]

    def save(self):
        with open(self.path, "wb") as f:
            f.write(self.data)


def patch_elf(path, patchelf, rel, policy):
    """Patches one file in place; returns (what changed, whether it now needs POLYFILL.so)."""
    e = Elf(path)
    renames, changes = {}, []
    for _i, name, vfile, vname, bind in e.refs():
        if not policy.forbidden(vfile, vname, rel):
            continue
        if (vfile, vname, name) in REPOINT:
            changes.append(f"{name}@{vname} -> @{REPOINT[vfile, vname, name]}")
        elif (vname, name) in RENAME:
            renames[name] = RENAME[vname, name]
            changes.append(f"{name}@{vname} -> {RENAME[vname, name]} ({POLYFILL_SONAME})")
        elif (vfile, vname, name) in UNVERSION_WEAK:
            if bind != STB_WEAK:
                die(f"{rel}: {name}@{vname} is not a weak reference; it cannot be unversioned")
            changes.append(f"{name}@{vname} (weak) -> unversioned")
        else:
            die(f"{rel}: {name}@{vname} ({vfile}) is newer than manylinux_2_28 allows and "
                "has no replacement (scripts/glibc228/patch.py REPOINT / RENAME / UNVERSION_WEAK)")
    if not changes:
        return [], False
    if renames:
        with tempfile.NamedTemporaryFile("w", suffix=".map") as m:
            m.write("".join(f"{a} {b}\n" for a, b in renames.items()))
            m.flush()
            subprocess.run([patchelf, "--rename-dynamic-symbols", m.name,
                            "--add-needed", POLYFILL_SONAME, path], check=True)
        e = Elf(path)
    # Version indices: re-point or clear (1 = unversioned, global).
    by_name = {(vfile, vname): idx for idx, (vfile, vname, *_r) in e.needs.items()}
    polyfill_names = set(RENAME.values())
    for i, name, vfile, vname, _bind in list(e.refs()):
        if name in polyfill_names:
            new = 1
        elif (vfile, vname, name) in REPOINT and policy.forbidden(vfile, vname, rel):
            target = (vfile, REPOINT[vfile, vname, name])
            if target not in by_name:
                die(f"{rel}: no {target[1]} requirement on {vfile} to re-point {name} to")
            new = by_name[target]
        elif (vfile, vname, name) in UNVERSION_WEAK and policy.forbidden(vfile, vname, rel):
            new = 1
        else:
            continue
        old = struct.unpack_from("<H", e.data, e.versym_off + 2 * i)[0]
        struct.pack_into("<H", e.data, e.versym_off + 2 * i, (old & 0x8000) | new)
    # Unlink the requirements no symbol uses any more (only those the policy forbids).
    used = {struct.unpack_from("<H", e.data, e.versym_off + 2 * i)[0] & 0x7FFF
            for i in range(len(e.syms))}
    for idx in sorted(e.needs, reverse=True):
        vfile, vname, aux, vn = e.needs[idx]
        if idx in used or not policy.forbidden(vfile, vname, rel):
            continue
        # Re-read the chain (earlier unlinks changed it) and drop this aux from it.
        _v, cnt, _f, vaux, _n = struct.unpack_from("<HHIII", e.data, vn)
        if cnt <= 1:
            die(f"{rel}: {vname} is the only version required of {vfile}; not handled")
        link, cur = vn + 8, vn + vaux
        while cur != aux:
            link = cur + 12
            cur += struct.unpack_from("<I", e.data, cur + 12)[0]
        anext = struct.unpack_from("<I", e.data, aux + 12)[0]
        if anext == 0:      # the last of its chain: the previous one becomes the last
            new_link = 0
        else:               # offsets are relative to the holder: vn for vn_aux, aux for vna_next
            new_link = (aux + anext) - (vn if link == vn + 8 else link - 12)
        struct.pack_into("<I", e.data, link, new_link)
        struct.pack_into("<H", e.data, vn + 2, cnt - 1)
        struct.pack_into("<IHHII", e.data, aux, 0, 0, 0, 0, 0)
        changes.append(f"requirement {vname} of {vfile} unlinked")
    e.save()
    return changes, bool(renames)


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def patch_files(root, rels, patchelf, policy):
    """Patches the ELF files among ROOT/REL in place; whether any now needs POLYFILL.so."""
    needs_polyfill = False
    for n in rels:
        p = os.path.join(root, n)
        if not is_elf(p):
            continue
        changes, polyfilled = patch_elf(p, patchelf, n, policy)
        for c in changes:
            print(f"  {n}: {c}", file=sys.stderr)
        needs_polyfill |= polyfilled
    return needs_polyfill


def verify(root, rels, policy):
    """After patching, nothing may still ask for more than POLICY allows; returns the newest
    GLIBC_ version required."""
    newest = (0,)
    for n in rels:
        p = os.path.join(root, n)
        if not is_elf(p):
            continue
        e = Elf(p)
        for idx, (vfile, vname, *_r) in e.needs.items():
            if policy.forbidden(vfile, vname, n):
                die(f"{n}: still requires {vname} of {vfile}")
            if vname.startswith("GLIBC_") and vfile not in policy.shipped:
                newest = max(newest, tuple(int(x) for x in vname[6:].split(".")))
    return ".".join(map(str, newest))


def sha256_record(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(src, out_dir, polyfill, patchelf):
    name = os.path.basename(src)
    m = re.fullmatch(r"(.+?-.+?-.+?-.+?)-(.+)\.whl", name)
    if not m:
        die(f"{name}: not a wheel file name")
    out_name = f"{m.group(1)}-{PLATFORM}.whl"
    work = tempfile.mkdtemp()
    try:
        with zipfile.ZipFile(src) as z:
            infos = z.infolist()
            z.extractall(work)
        modes = {i.filename: i.external_attr >> 16 for i in infos}
        names = [i.filename for i in infos if not i.is_dir()]
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/WHEEL"))
        libs = sorted({n.split("/")[0] for n in names if n.split("/")[0].endswith(".libs")})
        if len(libs) != 1:
            die(f"expected one <name>.libs/ folder in {name}, found {libs}")
        policy = Policy()
        if patch_files(work, names, patchelf, policy):
            lib = f"{libs[0]}/{POLYFILL_SONAME}"
            shutil.copyfile(polyfill, os.path.join(work, lib))
            names.append(lib)
            modes[lib] = 0o100755
        verify(work, names, policy)
        # WHEEL: the platform tag; RECORD: every file's hash and size.
        wheel_meta = os.path.join(work, dist_info, "WHEEL")
        text = open(wheel_meta).read()
        tags = re.findall(r"^Tag: (.+)$", text, re.M)
        if not tags:
            die("no Tag in WHEEL")
        for t in tags:
            text = text.replace(f"Tag: {t}", "Tag: " + "-".join(t.split("-")[:2] + [PLATFORM]))
        open(wheel_meta, "w").write(text)
        record = f"{dist_info}/RECORD"
        lines = []
        out = os.path.join(out_dir, out_name)
        tmp = out + ".partial"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for n in [n for n in names if n != record] + [record]:
                p = os.path.join(work, n)
                if n == record:
                    lines.append(f"{record},,")
                    data = ("\n".join(lines) + "\n").encode()
                else:
                    data = open(p, "rb").read()
                    lines.append(f"{n},{sha256_record(data)},{len(data)}")
                zi = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
                zi.external_attr = (modes.get(n) or 0o100644) << 16
                zi.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(zi, data)
        os.replace(tmp, out)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bundle(src, out_dir, polyfill, patchelf):
    name = os.path.basename(src)
    if not name.endswith(".tar.gz"):
        die(f"{name}: not a .tar.gz")
    work = tempfile.mkdtemp()
    try:
        with tarfile.open(src) as t:
            if hasattr(tarfile, "data_filter"):
                t.extractall(work, filter="tar")
            else:
                t.extractall(work)
        tops = os.listdir(work)
        if len(tops) != 1 or not os.path.isfile(os.path.join(work, tops[0], "bin", "descl")):
            die(f"{name}: no single <name>/bin/descl")
        root = os.path.join(work, tops[0])
        rels = sorted(os.path.join(d, f) for d in ("bin", "lib")
                      for f in os.listdir(os.path.join(root, d)))
        # What the bundle's own libraries define (libstdc++'s GLIBCXX_, libgcc_s's GCC_, ...).
        shipped = {}
        for n in rels:
            if n.startswith("lib/") and is_elf(os.path.join(root, n)):
                e = Elf(os.path.join(root, n))
                shipped[e.soname()] = e.defines
        policy = Policy(shipped)
        if patch_files(root, rels, patchelf, policy):
            lib = f"lib/{POLYFILL_SONAME}"
            shutil.copyfile(polyfill, os.path.join(root, lib))
            os.chmod(os.path.join(root, lib), 0o755)
            rels.append(lib)
            # The loader finds it as it finds lib/'s others: bin/descl's $ORIGIN/../lib (also
            # for libraries without a search path of their own), a library's $ORIGIN.
            for n in rels:
                e = Elf(os.path.join(root, n)) if is_elf(os.path.join(root, n)) else None
                if e is None or POLYFILL_SONAME not in e.dynamic.get("DT_NEEDED", []):
                    continue
                paths = ":".join(e.dynamic.get("DT_RPATH", []) + e.dynamic.get("DT_RUNPATH", []))
                want = "$ORIGIN/../lib" if n.startswith("bin/") else "$ORIGIN"
                if n.startswith("bin/") or e.dynamic.get("DT_RUNPATH"):
                    if want not in paths.split(":"):
                        die(f"{n}: its search path ({paths or 'none'}) does not hold {want}")
        floor = verify(root, rels, policy)
        readme = os.path.join(root, "README.txt")
        if os.path.isfile(readme):
            text = open(readme).read()
            new_text = re.sub(r"\(glibc [0-9.]+ or newer\)", f"(glibc {floor} or newer)", text, 1)
            if new_text == text and f"(glibc {floor} or newer)" not in text:
                die("README.txt has no \"(glibc X or newer)\" to update")
            open(readme, "w").write(new_text)
        # Repacked as scripts/bundle packs: names sorted, owner and group 0, no names.
        out = os.path.join(out_dir, name)
        tmp = out + ".partial"
        with open(tmp, "wb") as f, \
                gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=6, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as t:
            def owner0(ti):
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                return ti

            def add(rel):
                t.add(os.path.join(work, rel), arcname=rel, recursive=False, filter=owner0)
                if os.path.isdir(os.path.join(work, rel)):
                    for c in sorted(os.listdir(os.path.join(work, rel))):
                        add(os.path.join(rel, c))
            add(tops[0])
        os.replace(tmp, out)
        print(f"  glibc floor: {floor}", file=sys.stderr)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in ("wheel", "bundle"):
        sys.exit(__doc__)
    mode, src, out_dir, polyfill, patchelf = sys.argv[1:]
    print((wheel if mode == "wheel" else bundle)(src, out_dir, polyfill, patchelf))


if __name__ == "__main__":
    main()
