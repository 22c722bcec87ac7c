"""The manylinux_2_28 wheel from the bullseye one (scripts/wheel-glibc228 runs it).

    python patch_wheel.py IN.whl OUT_DIR POLYFILL.so PATCHELF     prints the new wheel's path

Every ELF file of IN.whl is checked for symbol references newer than manylinux_2_28 allows
(GLIBC_2.28, GLIBCXX_3.4.24, CXXABI_1.3.11, GCC_7.0.0) and each is handled, or the script fails:

- libm's exp/log/pow/log2@GLIBC_2.29 are re-pointed to @GLIBC_2.2.5 (the same functions behind
  the errno wrapper), an index of the file's existing libm.so.6 GLIBC_2.2.5 requirement;
- gettid and pthread_cond_clockwait@GLIBC_2.30 and libstdc++'s default basic_stringstream /
  basic_ostringstream constructors @GLIBCXX_3.4.26 are renamed (patchelf
  --rename-dynamic-symbols) to the descl_glibc228_ functions of POLYFILL.so and made
  unversioned, and POLYFILL.so is added as DT_NEEDED (patchelf --add-needed) and to descl.libs/;
- the version requirements no symbol uses any more are unlinked from .gnu.version_r, so that
  nothing asks the loader (or auditwheel) for them.

The new wheel is tagged manylinux_2_28_x86_64 (WHEEL's Tag, the file name) with a fresh RECORD.
Needs pyelftools (auditwheel's dependency).
"""
import base64
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
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


def die(msg):
    sys.exit(f"patch_wheel: FAIL: {msg}")


def too_new(version):
    m = re.fullmatch(r"([A-Z]+)_([0-9.]+)", version)
    if not m or m.group(1) not in LIMITS:
        return False
    return tuple(int(x) for x in m.group(2).split(".")) > LIMITS[m.group(1)]


class Elf:
    """The dynamic symbols of an ELF64 little-endian file with their version requirements."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.data = bytearray(f.read())
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if elf.elfclass != 64 or not elf.little_endian:
                die(f"{path}: not ELF64 little-endian")
            self.dynsym = elf.get_section_by_name(".dynsym")
            versym = elf.get_section_by_name(".gnu.version")
            verneed = elf.get_section_by_name(".gnu.version_r")
            if self.dynsym is None:
                self.syms = []
                return
            dynstr = elf.get_section(self.dynsym["sh_link"])
            self.versym_off = versym["sh_offset"] if versym else None
            self.verneed_off = verneed["sh_offset"] if verneed else None
            self.verneed_num = verneed["sh_info"] if verneed else 0
            self.dynstr_off = dynstr["sh_offset"]
            # (name, undefined, version index) per dynamic symbol
            self.syms = []
            off, n = self.dynsym["sh_offset"], self.dynsym["sh_size"] // 24
            for i in range(n):
                st_name, _info, _other, shndx = struct.unpack_from("<IBBH", self.data, off + 24 * i)
                ver = (struct.unpack_from("<H", self.data, self.versym_off + 2 * i)[0]
                       if self.versym_off is not None else 1)
                self.syms.append((self.string(st_name), shndx == 0, ver))
        # version index -> (file, version name, aux offset, verneed offset)
        self.needs = {}
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
        """(symbol index, name, file, version) of each versioned undefined symbol."""
        for i, (name, undef, ver) in enumerate(self.syms):
            if undef and (ver & 0x7FFF) >= 2 and (ver & 0x7FFF) in self.needs:
                vfile, vname = self.needs[ver & 0x7FFF][:2]
                yield i, name, vfile, vname

    def save(self):
        with open(self.path, "wb") as f:
            f.write(self.data)


def patch_elf(path, patchelf, rel):
    e = Elf(path)
    renames, changes = {}, []
    for _i, name, vfile, vname in e.refs():
        if not too_new(vname):
            continue
        if (vfile, vname, name) in REPOINT:
            changes.append(f"{name}@{vname} -> @{REPOINT[vfile, vname, name]}")
        elif (vname, name) in RENAME:
            renames[name] = RENAME[vname, name]
            changes.append(f"{name}@{vname} -> {RENAME[vname, name]} ({POLYFILL_SONAME})")
        else:
            die(f"{rel}: {name}@{vname} ({vfile}) is newer than manylinux_2_28 allows and "
                "has no replacement (scripts/glibc228/patch_wheel.py REPOINT / RENAME)")
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
    for i, name, vfile, vname in list(e.refs()):
        if name in polyfill_names:
            new = 1
        elif (vfile, vname, name) in REPOINT:
            target = (vfile, REPOINT[vfile, vname, name])
            if target not in by_name:
                die(f"{rel}: no {target[1]} requirement on {vfile} to re-point {name} to")
            new = by_name[target]
        else:
            continue
        old = struct.unpack_from("<H", e.data, e.versym_off + 2 * i)[0]
        struct.pack_into("<H", e.data, e.versym_off + 2 * i, (old & 0x8000) | new)
    # Unlink the requirements no symbol uses any more (only those manylinux_2_28 forbids).
    used = {struct.unpack_from("<H", e.data, e.versym_off + 2 * i)[0] & 0x7FFF
            for i in range(len(e.syms))}
    for idx in sorted(e.needs, reverse=True):
        vfile, vname, aux, vn = e.needs[idx]
        if idx in used or not too_new(vname):
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


def sha256_record(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    src, out_dir, polyfill, patchelf = sys.argv[1:]
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
        needs_polyfill = False
        for n in names:
            p = os.path.join(work, n)
            with open(p, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            changes, polyfilled = patch_elf(p, patchelf, n)
            for c in changes:
                print(f"  {n}: {c}", file=sys.stderr)
            needs_polyfill |= polyfilled
        if needs_polyfill:
            lib = f"{libs[0]}/{POLYFILL_SONAME}"
            shutil.copyfile(polyfill, os.path.join(work, lib))
            names.append(lib)
            modes[lib] = 0o100755
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
        print(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
