//go:build !linux

package mountdetect

type strategy int

const strategyAuto strategy = 0

func autoStrategy() strategy { return strategyAuto }

func kernelFeatures() KernelFeatures { return KernelFeatures{} }

func detect(path string, _ *MountTable) (FSInfo, error) { return FSInfo{Path: path}, ErrUnsupported }

type mountTableData struct{}

func readMountTable() (*MountTable, error) { return nil, ErrUnsupported }

func (t *MountTable) nestedMounts(string) ([]Mount, error) { return nil, ErrUnsupported }

func (t *MountTable) fromSource(string) []SourceMount { return nil }

func isMountPoint(string, strategy) (mounted, sure bool, err error) {
	return false, false, ErrUnsupported
}

func nestedMounts(string) ([]Mount, error) { return nil, ErrUnsupported }

func removeAll(path string, _ *config) error {
	if _, _, err := validateRemovePath(path); err != nil {
		return err
	}
	return ErrUnsupported
}

func removeAllAt(_ int, name, path string, _ *config) error {
	if err := validateRemoveName(name, path); err != nil {
		return err
	}
	return ErrUnsupported
}

func checkMountNamespace(*namespaceConfig) MountNamespace {
	return MountNamespace{Err: ErrUnsupported}
}

func lookAt(_ int, _, path string, _ Open) (Entry, error) {
	return Entry{Path: path, Fd: -1}, ErrUnsupported
}

func (t *MountTable) mountOf(Entry) (Mount, bool) { return Mount{}, false }

func (e *Entry) close() { e.Fd = -1 }

func kernelNumbersInitialMountNamespace() bool { return false }

func (t *MountTable) mountsOnRoot(Entry) (at, beneath []Mount, ok bool) { return nil, nil, false }

func newParent(*MountTable, int, string) (*Parent, error) { return nil, ErrUnsupported }

func (p *Parent) narrow() {}

func (t *MountTable) child(_ *Parent, e Entry, _ string) (FSInfo, []Mount, []Mount, bool) {
	return FSInfo{Path: e.Path}, nil, nil, false
}
