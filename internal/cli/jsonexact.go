package cli

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// jsonEncoder writes the --json output of every command: one JSON object
// per line, with nothing escaped for HTML (paths and sources print as they
// are), and every string exactly.
//
// A JSON string is Unicode: encoding/json writes each byte of a string
// that is not valid UTF-8 as U+FFFD, so "v\xff" and "v\xfe", two volume
// directories whoever writes into a pod directory can make, would print
// alike. So every string field whose value is not valid UTF-8 is followed
// by a field of the same name with "Base64" appended, holding its exact
// bytes in standard base64 ("path":"/a/v\ufffd","pathBase64":"L2Evdv8=");
// for a list of strings, a list with each element's bytes. The readable
// field is kept, so a consumer that does not care sees what it saw before,
// and valid UTF-8 adds nothing: the output is then encoding/json's, byte
// for byte.
type jsonEncoder struct {
	w   io.Writer
	enc *json.Encoder
}

func newJSONEncoder(w io.Writer) *jsonEncoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // paths and sources print as they are
	return &jsonEncoder{w: w, enc: enc}
}

// exactSuffix names the field with a string's exact bytes.
const exactSuffix = "Base64"

// Encode writes v (a struct, or a pointer to one) as one line.
func (e *jsonEncoder) Encode(v any) error {
	rv := reflect.ValueOf(v)
	if !hasInvalidUTF8(rv) {
		return e.enc.Encode(v)
	}
	var b bytes.Buffer
	if err := writeExact(&b, rv); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := e.w.Write(b.Bytes())
	return err
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// marshalsCache memoizes marshals by type, as encoding/json caches its
// own encoders: Implements is slow enough to cost a scan of 10,000
// volumes 60 ms of CPU when asked of every field.
var marshalsCache sync.Map // reflect.Type → bool

// marshals reports whether values of t encode themselves (as the enums of
// this package do): they are written as encoding/json writes them.
func marshals(t reflect.Type) bool {
	if m, ok := marshalsCache.Load(t); ok {
		return m.(bool)
	}
	m := t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
		reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler)
	marshalsCache.Store(t, m)
	return m
}

// hasInvalidUTF8 reports whether anything writeExact would add a field
// for is in v: a string that is not valid UTF-8, in a struct field (of v,
// or of the structs, pointers and lists it holds).
func hasInvalidUTF8(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && hasInvalidUTF8(v.Elem())
	}
	if marshals(v.Type()) {
		return false
	}
	switch v.Kind() {
	case reflect.String:
		return !utf8.ValidString(v.String())
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); (f.IsExported() || f.Anonymous) && f.Tag.Get("json") != "-" && hasInvalidUTF8(v.Field(i)) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return false // []byte: base64 already
		}
		for i := range v.Len() {
			if hasInvalidUTF8(v.Index(i)) {
				return true
			}
		}
	}
	return false
}

// writeExact writes v as encoding/json would, adding after each string
// field that is not valid UTF-8 its exact form (see jsonEncoder).
func writeExact(b *bytes.Buffer, v reflect.Value) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		if !marshals(v.Type()) {
			return writeExact(b, v.Elem())
		}
	}
	switch {
	case marshals(v.Type()):
	case v.Kind() == reflect.Struct:
		b.WriteByte('{')
		first := true
		if err := writeFields(b, v, &first); err != nil {
			return err
		}
		b.WriteByte('}')
		return nil
	case (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) && v.Type().Elem().Kind() != reflect.Uint8:
		if v.Kind() == reflect.Slice && v.IsNil() {
			b.WriteString("null")
			return nil
		}
		b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeExact(b, v.Index(i)); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	}
	return writeValue(b, v)
}

// writeValue writes v with encoding/json. A value reached through an
// embedded struct of an unexported type (failureJSON) cannot be handed
// over as it is; its basic kinds are copied out.
func writeValue(b *bytes.Buffer, v reflect.Value) error {
	if v.CanInterface() {
		return writeLeaf(b, v.Interface())
	}
	switch v.Kind() {
	case reflect.String:
		return writeLeaf(b, v.String())
	case reflect.Bool:
		return writeLeaf(b, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return writeLeaf(b, v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return writeLeaf(b, v.Uint())
	case reflect.Float32:
		return writeLeaf(b, float32(v.Float()))
	case reflect.Float64:
		return writeLeaf(b, v.Float())
	}
	return fmt.Errorf("write JSON: cannot write a %s reached through an unexported field", v.Type())
}

// writeFields writes the fields of the struct v, those of embedded
// structs in their place, as encoding/json orders them.
func writeFields(b *bytes.Buffer, v reflect.Value, first *bool) error {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct && !marshals(f.Type) {
			if err := writeFields(b, fv, first); err != nil {
				return err
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.Contains(","+opts+",", ",omitempty,") && emptyValue(fv) {
			continue
		}
		if !*first {
			b.WriteByte(',')
		}
		*first = false
		if err := writeLeaf(b, name); err != nil {
			return err
		}
		b.WriteByte(':')
		if err := writeExact(b, fv); err != nil {
			return err
		}
		if exact, ok := exactForm(fv); ok {
			b.WriteByte(',')
			if err := writeLeaf(b, name+exactSuffix); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := writeLeaf(b, exact); err != nil {
				return err
			}
		}
	}
	return nil
}

// exactForm is the exact form of a string field (its bytes in base64) or
// of a list of strings (each element's), when one of them is not valid
// UTF-8.
func exactForm(v reflect.Value) (any, bool) {
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if marshals(v.Type()) {
		return nil, false
	}
	enc := base64.StdEncoding.EncodeToString
	switch {
	case v.Kind() == reflect.String && !utf8.ValidString(v.String()):
		return enc([]byte(v.String())), true
	case (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) && v.Type().Elem().Kind() == reflect.String && !marshals(v.Type().Elem()):
		out := make([]string, v.Len())
		invalid := false
		for i := range out {
			s := v.Index(i).String()
			invalid = invalid || !utf8.ValidString(s)
			out[i] = enc([]byte(s))
		}
		return out, invalid
	}
	return nil, false
}

// emptyValue is encoding/json's test for omitempty.
func emptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// writeLeaf writes v with encoding/json, HTML left alone.
func writeLeaf(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}
