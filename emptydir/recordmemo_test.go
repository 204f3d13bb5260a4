package emptydir

import (
	"reflect"
	"slices"
	"testing"
)

// TestRecordMemoKeepsNoPointer: the fields of metadata that can share
// memory with a copy (pointers, slices, maps, interfaces) are exactly
// those recordMemo.decode refuses to keep a record with. A field of that
// kind added to metadata fails here until decode checks it too.
func TestRecordMemoKeepsNoPointer(t *testing.T) {
	var shared []string
	typ := reflect.TypeOf(metadata{})
	for i := range typ.NumField() {
		switch typ.Field(i).Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface, reflect.Chan, reflect.Func:
			shared = append(shared, typ.Field(i).Name)
		}
	}
	if want := []string{"Mode", "Mount", "Location"}; !slices.Equal(shared, want) {
		t.Fatalf("metadata's fields that share memory are %q; recordMemo.decode checks %q", shared, want)
	}
}

// TestRecordMemoDecodesAsDecodeMetadata: whatever the order of the
// records, each decode through a memo is what decodeMetadata makes of the
// same bytes (errors included), and a record handed out can be changed
// without changing the next one.
func TestRecordMemoDecodesAsDecodeMetadata(t *testing.T) {
	records := []string{
		`{"medium":"Default"}` + "\n",
		`{"medium":"Default"}` + "\n",
		`{"medium":"Default","sizeLimit":1048576}` + "\n",
		`{"medium":"Default"}` + "\n",
		`{"medium":"Memory","sizeBytes":1048576,"mount":{"uniqueID":7,"id":40,"dev":57,"fsType":"tmpfs","source":"nodevol-x"}}` + "\n",
		`{"medium":"Memory","sizeBytes":1048576,"mount":{"uniqueID":7,"id":40,"dev":57,"fsType":"tmpfs","source":"nodevol-x"}}` + "\n",
		`{"medium":"Default","mode":448}` + "\n",
		`{"medium":"Default","mode":448}` + "\n",
		`{"medium":"Memory"`,
		`{"medium":"Default"}` + "\n",
		`{"medium":"Nonsense"}` + "\n",
		`{"medium":"Default"}` + "\n",
		`{"medium":"Default"} `,
	}
	var memo recordMemo
	for i, r := range records {
		got, gotErr := memo.decode([]byte(r))
		want, wantErr := decodeMetadata([]byte(r))
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("record %d %q: memo says %v, decodeMetadata %v", i, r, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %d %q: memo decoded %+v, decodeMetadata %+v", i, r, got, want)
		}
		if got != nil {
			// Whatever the caller does with its record is not the next
			// caller's.
			got.SizeBytes, got.QuotaProjectID, got.StickyBit = 99, 99, true
		}
	}
}
