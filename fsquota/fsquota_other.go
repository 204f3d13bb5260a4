//go:build !linux

package fsquota

import (
	"runtime"

	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/mountdetect"
)

// Project quotas are a Linux feature: every operation reports
// ErrUnsupported elsewhere.

type quotaBackend interface{}

func defaultBackend() quotaBackend { return nil }

func testKernel(testhook.QuotaKernel) quotaBackend { return nil }

type mountKey struct{}

type quotaState struct{}

func unsupportedOS(path string) error {
	return &UnsupportedError{Path: path, Reason: "project quotas are Linux-only (this is " + runtime.GOOS + ")"}
}

func (m *Manager) checkSupport(path string) error { return unsupportedOS(path) }

func (m *Manager) assign(dirFd int, path string, limitBytes int64) (Project, error) {
	return Project{}, unsupportedOS(path)
}

func (m *Manager) clear(dirFd int, path string, p *Project) error { return unsupportedOS(path) }

func (m *Manager) usage(dirFd int, path string) (Usage, error) { return Usage{}, unsupportedOS(path) }

func (m *Manager) dirUsage(path string) (DirUsage, error) {
	d := DirUsage{NoQuota: unsupportedOS(path)}
	u, err := mountdetect.DiskUsage(path)
	if err != nil {
		return DirUsage{}, err
	}
	d.Bytes, d.Inodes, d.Source, d.Skipped = u.Bytes, u.Inodes, SourceWalk, u.Skipped
	return d, nil
}

func projectID(path string) (uint32, error) { return 0, unsupportedOS(path) }

func setProjectID(path string, id uint32) error { return unsupportedOS(path) }

func haveQuotactlFD() bool { return false }
