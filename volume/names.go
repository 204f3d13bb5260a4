package volume

import (
	"errors"
	"fmt"
	"strings"

	utilstrings "k8s.io/utils/strings"
)

// ErrInvalidName is matched (errors.Is) by every *InvalidNameError.
var ErrInvalidName = errors.New("invalid name")

// InvalidNameError says which field was invalid, its value and why.
type InvalidNameError struct {
	Field  string // "plugin name", "pod UID", "volume name", ...
	Value  string
	Reason string
}

func (e *InvalidNameError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidName) true.
func (e *InvalidNameError) Is(target error) bool { return target == ErrInvalidName }

const (
	maxQualifiedNameLen = 63
	maxDNSSubdomainLen  = 253
	maxDNSLabelLen      = 63
	// MaxPodUIDLen bounds pod UIDs (Kubernetes UIDs are 36-byte UUIDs;
	// static pods use a 32-byte hash).
	MaxPodUIDLen = 128
	// maxElementLen is the longest single path element Linux accepts.
	maxElementLen = 255
)

func isAlnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func isLowerAlnum(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') }

// dnsLabelProblem returns why s is not an RFC 1123 label, or "".
func dnsLabelProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > maxDNSLabelLen:
		return fmt.Sprintf("must be at most %d characters", maxDNSLabelLen)
	case !isLowerAlnum(s[0]) || !isLowerAlnum(s[len(s)-1]):
		return "must start and end with a lowercase letter or digit"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLowerAlnum(c) && c != '-' {
			return fmt.Sprintf("character %q not allowed: only lowercase letters, digits and '-'", c)
		}
	}
	return ""
}

// dnsSubdomainProblem returns why s is not an RFC 1123 subdomain, or "".
func dnsSubdomainProblem(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > maxDNSSubdomainLen {
		return fmt.Sprintf("must be at most %d characters", maxDNSSubdomainLen)
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" {
			return "must not contain empty labels"
		}
		if !isLowerAlnum(label[0]) || !isLowerAlnum(label[len(label)-1]) {
			return "each dot-separated part must start and end with a lowercase letter or digit"
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !isLowerAlnum(c) && c != '-' {
				return fmt.Sprintf("character %q not allowed: only lowercase letters, digits, '-' and '.'", c)
			}
		}
	}
	return ""
}

// ValidatePluginName checks a plugin name: a Kubernetes qualified name,
// [prefix/]name, where the optional prefix is a DNS subdomain and name is
// at most 63 letters, digits, '-', '_' and '.', starting and ending with a
// letter or digit. No '~' can appear, so escaping is lossless.
func ValidatePluginName(name string) error {
	bad := func(reason string) error {
		return &InvalidNameError{Field: "plugin name", Value: name, Reason: reason}
	}
	prefix, short, hasPrefix := strings.Cut(name, "/")
	if !hasPrefix {
		short, prefix = prefix, ""
	} else if p := dnsSubdomainProblem(prefix); p != "" {
		return bad("prefix " + p)
	}
	switch {
	case short == "":
		return bad("name part must not be empty")
	case len(short) > maxQualifiedNameLen:
		return bad(fmt.Sprintf("name part must be at most %d characters", maxQualifiedNameLen))
	case !isAlnum(short[0]) || !isAlnum(short[len(short)-1]):
		return bad("name part must start and end with a letter or digit")
	}
	for i := 0; i < len(short); i++ {
		if c := short[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return bad(fmt.Sprintf("character %q not allowed in the name part: only letters, digits, '-', '_' and '.'", c))
		}
	}
	return nil
}

// inTreePlugin is, for escaped false, the directory name of the in-tree
// plugin s, and for escaped true the plugin whose directory name is s,
// for the plugins of most of a node's volume directories:
// EscapePluginName and UnescapePluginName return them without making
// them again (a scan asks for every volume). TestInTreePluginNames checks
// each pair against the escaping.
func inTreePlugin(s string, escaped bool) (string, bool) {
	for _, p := range [...][2]string{
		{"kubernetes.io/empty-dir", "kubernetes.io~empty-dir"},
		{"kubernetes.io/projected", "kubernetes.io~projected"},
		{"kubernetes.io/secret", "kubernetes.io~secret"},
		{"kubernetes.io/configmap", "kubernetes.io~configmap"},
		{"kubernetes.io/csi", "kubernetes.io~csi"},
		{"kubernetes.io/downward-api", "kubernetes.io~downward-api"},
	} {
		if escaped && s == p[1] {
			return p[0], true
		}
		if !escaped && s == p[0] {
			return p[1], true
		}
	}
	return "", false
}

// EscapePluginName turns a plugin name into the directory name the kubelet
// uses for it ('/' → '~': kubernetes.io/empty-dir → kubernetes.io~empty-dir).
func EscapePluginName(name string) (string, error) {
	if dir, ok := inTreePlugin(name, false); ok {
		return dir, nil
	}
	if err := ValidatePluginName(name); err != nil {
		return "", err
	}
	return utilstrings.EscapeQualifiedName(name), nil
}

// UnescapePluginName turns a plugin directory name back into the plugin
// name, and checks the result (so "a~b~c" or "x/y" are refused).
func UnescapePluginName(dir string) (string, error) {
	if name, ok := inTreePlugin(dir, true); ok {
		return name, nil
	}
	if strings.Contains(dir, "/") {
		return "", &InvalidNameError{Field: "plugin directory", Value: dir, Reason: "must not contain '/'"}
	}
	name := utilstrings.UnescapeQualifiedName(dir)
	if err := ValidatePluginName(name); err != nil {
		return "", &InvalidNameError{Field: "plugin directory", Value: dir, Reason: err.(*InvalidNameError).Reason}
	}
	return name, nil
}

// elementProblem returns why s cannot be used as one path element, or "".
func elementProblem(s string, maxLen int) string {
	switch {
	case s == "":
		return "must not be empty"
	case s == "." || s == "..":
		return "must not be \".\" or \"..\""
	case strings.ContainsRune(s, '/'):
		return "must not contain '/'"
	case strings.IndexByte(s, 0) >= 0:
		return "must not contain a NUL byte"
	case len(s) > maxLen:
		return fmt.Sprintf("must be at most %d bytes", maxLen)
	}
	return ""
}

// ValidatePodUID checks a pod UID: not empty, not "." or "..", no '/', no
// NUL, at most MaxPodUIDLen bytes.
func ValidatePodUID(uid string) error {
	if p := elementProblem(uid, MaxPodUIDLen); p != "" {
		return &InvalidNameError{Field: "pod UID", Value: uid, Reason: p}
	}
	return nil
}

// ValidateVolumeName checks the name of a volume in a pod spec: an RFC 1123
// DNS label, as Kubernetes requires.
func ValidateVolumeName(name string) error {
	if p := dnsLabelProblem(name); p != "" {
		return &InvalidNameError{Field: "volume name", Value: name, Reason: p}
	}
	return nil
}

// ValidateVolumeDirName checks a volume directory name found on disk. It is
// looser than ValidateVolumeName because plugins other than emptyDir name
// their directories after persistent volumes (DNS subdomains, with dots):
// one safe path element, not "." or "..", no '/' or NUL, at most 255 bytes.
func ValidateVolumeDirName(name string) error {
	if p := elementProblem(name, maxElementLen); p != "" {
		return &InvalidNameError{Field: "volume directory name", Value: name, Reason: p}
	}
	return nil
}

// ValidateContainerName checks a container name (a DNS label), as used in
// the subpath layout.
func ValidateContainerName(name string) error {
	if p := dnsLabelProblem(name); p != "" {
		return &InvalidNameError{Field: "container name", Value: name, Reason: p}
	}
	return nil
}
