package volume

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestFormatQuantity(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1024: "1Ki", 2 << 20: "2Mi", 1 << 30: "1Gi", 3 << 29: "1536Mi", 1<<20 + 1: "1048577"} {
		if got := FormatQuantity(n); got != want {
			t.Errorf("FormatQuantity(%d) = %q; want %q", n, got, want)
		}
	}
}

func TestMediumNames(t *testing.T) {
	for m, want := range map[Medium]string{MediumDefault: "Default", MediumMemory: "Memory", MediumHugePages: "HugePages", Medium(9): "Medium(9)"} {
		if m.String() != want {
			t.Errorf("%d.String() = %q; want %q", int(m), m.String(), want)
		}
	}
	b, _ := json.Marshal(struct{ M Medium }{MediumHugePages})
	if string(b) != `{"M":"HugePages"}` {
		t.Errorf("JSON = %s", b)
	}
}

// TestMediumText pins what emptyDir's metadata files on disk hold: the
// names, and "" for Default in files of older versions.
func TestMediumText(t *testing.T) {
	for _, c := range []struct {
		json string
		want Medium
		err  bool
	}{
		{`"Default"`, MediumDefault, false},
		{`""`, MediumDefault, false},
		{`"Memory"`, MediumMemory, false},
		{`"HugePages"`, MediumHugePages, false},
		{`"HugePages-2Mi"`, 0, true},
		{`"memory"`, 0, true},
		{`1`, 0, true},
	} {
		var m Medium
		err := json.Unmarshal([]byte(c.json), &m)
		if (err != nil) != c.err || (err == nil && m != c.want) {
			t.Errorf("json.Unmarshal(%s) = %v, %v; want %v, err=%v", c.json, m, err, c.want, c.err)
		}
	}
	for _, m := range []Medium{MediumDefault, MediumMemory, MediumHugePages} {
		b, err := json.Marshal(m)
		var back Medium
		if err != nil || json.Unmarshal(b, &back) != nil || back != m {
			t.Errorf("%v → %s, %v → %v; want the same medium back", m, b, err, back)
		}
	}
}

func TestMediumStorageMedium(t *testing.T) {
	for _, c := range []struct {
		m        Medium
		pageSize int64
		want     StorageMedium
	}{
		{MediumDefault, 0, StorageMediumDefault},
		{MediumMemory, 0, StorageMediumMemory},
		{MediumHugePages, 0, StorageMediumHugePages},
		{MediumHugePages, 2 << 20, "HugePages-2Mi"},
		{MediumHugePages, 1 << 30, "HugePages-1Gi"},
	} {
		if got := c.m.StorageMedium(c.pageSize); got != c.want {
			t.Errorf("%v.StorageMedium(%d) = %q; want %q", c.m, c.pageSize, got, c.want)
		}
	}
}

func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"2M", "1G", "2048k", "2Mi", "0", "", "9223372036854775807", "8E", "1KiB", "2x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseQuantity(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseQuantity(%q) = %d < 0", s, n)
		}
		// Every accepted size prints as a quantity that parses back to it.
		q := FormatQuantity(n)
		back, err := ParseQuantity(q)
		if err != nil || back != n {
			t.Fatalf("ParseQuantity(%q) = %d; FormatQuantity → %q → %d, %v", s, n, q, back, err)
		}
	})
}

func ExampleFormatQuantity() {
	fmt.Println(FormatQuantity(2097152), FormatQuantity(1<<30), FormatQuantity(1000))
	// Output: 2Mi 1Gi 1000
}
