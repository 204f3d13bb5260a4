package mountdetect

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring remover (measured and not adopted: see
// docs/benchmarks.md) submits the floor's unlinks as IORING_OP_UNLINKAT
// (Linux 5.11) in batches, one io_uring_enter per batch instead of one
// system call per entry. The kernel cannot unlink without blocking, so it
// hands every request to its io-wq worker threads: the unlinks of one
// directory then contend for its lock from several threads. Raw ring
// handling, no cgo, test code only.

const (
	ioringOpUnlinkat     = 36
	ioringEnterGetevents = 1
	ioringOffSQRing      = 0
	ioringOffCQRing      = 0x8000000
	ioringOffSQEs        = 0x10000000
	// uringDepth is the batch: requests in flight at once.
	uringDepth = 64
)

// The layouts of struct io_uring_params and struct io_uring_sqe/cqe
// (include/uapi/linux/io_uring.h).
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

type uringSQE struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off, addr     uint64
	len, opFlags  uint32 // opFlags: unlink_flags for UNLINKAT
	userData      uint64
	bufIndex      uint16
	personality   uint16
	spliceFdIn    int32
	addr3, pad    uint64
}

type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

type uring struct {
	fd                     int
	sq, cq, sqeMem         []byte
	sqTail, sqMask, cqHead *uint32
	cqTail, cqMask         *uint32
	sqArray                []uint32
	sqes                   []uringSQE
	cqes                   []uringCQE
}

func newUring(entries uint32) (*uring, error) {
	var p uringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &uring{fd: int(fd)}
	mmap := func(off int64, size int) ([]byte, error) {
		return unix.Mmap(r.fd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	}
	var err error
	if r.sq, err = mmap(ioringOffSQRing, int(p.sqOff.array+p.sqEntries*4)); err == nil {
		if r.cq, err = mmap(ioringOffCQRing, int(p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))); err == nil {
			r.sqeMem, err = mmap(ioringOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(uringSQE{})))
		}
	}
	if err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring mmap: %w", err)
	}
	u32 := func(m []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }
	r.sqTail, r.sqMask = u32(r.sq, p.sqOff.tail), u32(r.sq, p.sqOff.ringMask)
	r.cqHead, r.cqTail, r.cqMask = u32(r.cq, p.cqOff.head), u32(r.cq, p.cqOff.tail), u32(r.cq, p.cqOff.ringMask)
	r.sqArray = unsafe.Slice(u32(r.sq, p.sqOff.array), p.sqEntries)
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&r.cq[p.cqOff.cqes])), p.cqEntries)
	return r, nil
}

func (r *uring) close() {
	for _, m := range [][]byte{r.sq, r.cq, r.sqeMem} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	unix.Close(r.fd)
}

// unlinkAll unlinks every entry of d, at most uringDepth in flight, and
// waits for all of them. The names stay reachable through d while the
// kernel reads them (Go's heap does not move).
func (r *uring) unlinkAll(d floorDir) error {
	next, inflight := 0, 0
	for next < len(d.entries) || inflight > 0 {
		tail := atomic.LoadUint32(r.sqTail)
		submit := 0
		for next < len(d.entries) && inflight < uringDepth {
			e := &d.entries[next]
			i := tail & *r.sqMask
			r.sqes[i] = uringSQE{opcode: ioringOpUnlinkat, fd: int32(d.fd), addr: uint64(uintptr(unsafe.Pointer(&e.name[0]))), opFlags: uint32(e.flags), userData: uint64(next)}
			r.sqArray[i] = i
			tail++
			next++
			inflight++
			submit++
		}
		atomic.StoreUint32(r.sqTail, tail)
		if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(submit), 1, ioringEnterGetevents, 0, 0); errno != 0 && errno != unix.EINTR {
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
		head, ctail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
		for ; head != ctail; head++ {
			c := r.cqes[head&*r.cqMask]
			if c.res < 0 {
				atomic.StoreUint32(r.cqHead, head+1)
				name := d.entries[c.userData].name
				return fmt.Errorf("unlinkat %s: %w", name[:len(name)-1], unix.Errno(-c.res))
			}
			inflight--
		}
		atomic.StoreUint32(r.cqHead, head)
	}
	return nil
}

// unlinkRing is the floor with io_uring batches: listed beforehand
// (untimed), each directory's entries in inode order.
func unlinkRing(root string) (func() error, error) {
	r, err := newUring(uringDepth)
	if err != nil {
		return nil, err
	}
	t, err := listTree(root)
	if err != nil {
		r.close()
		return nil, err
	}
	return func() error {
		defer r.close()
		return t.remove(r.unlinkAll)
	}, nil
}
