package mountdetect

import (
	"encoding/binary"
	"errors"
	"unsafe"
)

// A linux_dirent64 record as getdents64(2) fills it:
//
//	u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[] (NUL-terminated)
const (
	direntReclenOff = 16
	direntTypeOff   = 18
	direntNameOff   = 19
)

var errBadDirent = errors.New("malformed getdents64 record")

// dirent is one parsed record. name aliases the read buffer; it ends before
// the terminating NUL, which stays in the buffer at nameStart+len(name) so
// the name can be handed to a syscall without copying.
type dirent struct {
	ino       uint64
	typ       uint8
	name      []byte
	nameStart int
}

// nextDirent parses the record at buf[off:] and returns it with the offset
// of the next record. It never reads past len(buf) and rejects records
// whose length or name is inconsistent.
func nextDirent(buf []byte, off int) (dirent, int, error) {
	if len(buf)-off < direntNameOff+1 {
		return dirent{}, 0, errBadDirent
	}
	reclen := int(binary.NativeEndian.Uint16(buf[off+direntReclenOff:]))
	if reclen < direntNameOff+1 || reclen > len(buf)-off {
		return dirent{}, 0, errBadDirent
	}
	rec := buf[off : off+reclen]
	nameEnd := direntNameOff
	for nameEnd < reclen && rec[nameEnd] != 0 {
		nameEnd++
	}
	if nameEnd == reclen || nameEnd == direntNameOff {
		return dirent{}, 0, errBadDirent // no terminating NUL, or an empty name
	}
	return dirent{
		ino:       binary.NativeEndian.Uint64(rec),
		typ:       rec[direntTypeOff],
		name:      rec[direntNameOff:nameEnd],
		nameStart: off + direntNameOff,
	}, off + reclen, nil
}

// isDotOrDotDot reports whether name is "." or "..".
func isDotOrDotDot(name []byte) bool {
	return (len(name) == 1 && name[0] == '.') || (len(name) == 2 && name[0] == '.' && name[1] == '.')
}

// fileEnt is a batch entry kept for the action: the record's inode and
// where its name lies in the read buffer, 16 bytes instead of a dirent's
// 48, since a batch of a large directory holds hundreds of thousands.
type fileEnt struct {
	ino   uint64
	start uint32 // offset of the name in the buffer (a batch is at most maxBatchSize)
	len   uint8  // a name is at most 255 bytes
	typ   uint8
}

func (d dirent) fileEnt() fileEnt {
	return fileEnt{ino: d.ino, start: uint32(d.nameStart), len: uint8(len(d.name)), typ: d.typ}
}

// name is the entry's name inside buf, the buffer it was read into.
func (e fileEnt) name(buf []byte) []byte { return buf[e.start : e.start+uint32(e.len)] }

// cstr returns a pointer to the NUL-terminated name inside buf.
func (e fileEnt) cstr(buf []byte) *byte { return (*byte)(unsafe.Pointer(&buf[e.start])) }
