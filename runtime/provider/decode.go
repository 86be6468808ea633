package provider

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Events and work items are decoded field by field, as they are encoded (see
// encode.go): a turn decodes its instance's whole history, and msgpack's reflection
// took an allocation of the whole struct per event besides its fields. Each field
// is read by the decoder msgpack's reflection would use for its type, fields it
// does not know are skipped, and a nil map gives the zero value, as before;
// TestDecodeMatchesMsgpack checks it. Unlike msgpack's reflection it takes no
// struct encoded as an array, which duroq never writes.

// fieldReader reads the fields of one encoded struct.
type fieldReader struct {
	r   bytes.Reader
	dec *msgpack.Decoder
	key [32]byte // longer keys are no field's
}

var fieldReaders = sync.Pool{New: func() any {
	fr := &fieldReader{}
	fr.dec = msgpack.NewDecoder(&fr.r)
	return fr
}}

var errLongKey = errors.New("a field name longer than the input")

// decode reads b, formatV1 and a map, giving each entry's value to field with its
// name (nil for a name no field has).
func decode(what string, b []byte, field func(d *msgpack.Decoder, name []byte) error) error {
	if len(b) == 0 || b[0] != formatV1 {
		return decodeError(what, errors.New("unknown format"), firstByte(b))
	}
	fr := fieldReaders.Get().(*fieldReader)
	defer func() {
		fr.r.Reset(nil) // the pool must not keep b alive
		fieldReaders.Put(fr)
	}()
	fr.r.Reset(b[1:])
	fr.dec.Reset(&fr.r)
	n, err := fr.mapLen()
	for i := 0; err == nil && i < n; i++ {
		var name []byte
		if name, err = fr.name(); err == nil {
			err = field(fr.dec, name)
		}
	}
	if err != nil {
		return decodeError(what, err, nil)
	}
	return nil
}

// mapLen reads the length of the map (-1: nil), which DecodeMapLen would also read
// from inside an extension, unlike msgpack's reflection.
func (fr *fieldReader) mapLen() (int, error) {
	c, err := fr.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsExt(c) {
		return 0, fmt.Errorf("code %#x where a map was expected", c)
	}
	return fr.dec.DecodeMapLen()
}

// name reads a field name: nil for one longer than any field's, which is skipped.
func (fr *fieldReader) name() ([]byte, error) {
	n, err := fr.dec.DecodeBytesLen()
	switch {
	case err != nil:
		return nil, err
	case n <= 0:
		return nil, nil
	case n <= len(fr.key):
		return fr.key[:n], fr.dec.ReadFull(fr.key[:n])
	case n > fr.r.Len():
		return nil, errLongKey
	}
	_, err = fr.r.Seek(int64(n), io.SeekCurrent)
	return nil, err
}

// decodeString reads a string field into a string type.
func decodeString[S ~string](d *msgpack.Decoder, into *S) error {
	s, err := d.DecodeString()
	*into = S(s)
	return err
}

// decodeStringPtr reads a *string field: nil stays nil.
func decodeStringPtr(d *msgpack.Decoder, into **string) error {
	if c, err := d.PeekCode(); err != nil || c == msgpcode.Nil {
		*into = nil
		if err != nil {
			return err
		}
		return d.Skip()
	}
	s, err := d.DecodeString()
	*into = &s
	return err
}

func decodeUint64(d *msgpack.Decoder, into *uint64) (err error) {
	*into, err = d.DecodeUint64()
	return err
}

func decodeInt64(d *msgpack.Decoder, into *int64) (err error) {
	*into, err = d.DecodeInt64()
	return err
}

// decodeValue reads a rarely set field through msgpack's reflection, into a value
// of its own: the struct decoded stays on the stack.
func decodeValue[T any](d *msgpack.Decoder, into *T) error {
	var v T
	err := d.Decode(&v)
	*into = v
	return err
}

// field reads the field named name into e.
func (e *Event) field(d *msgpack.Decoder, name []byte) error {
	switch string(name) {
	case "k":
		return decodeString(d, &e.Kind)
	case "id":
		return decodeUint64(d, &e.EventID)
	case "src":
		return decodeUint64(d, &e.SourceEventID)
	case "i":
		return decodeString(d, &e.InstanceID)
	case "x":
		return decodeUint64(d, &e.ExecutionID)
	case "ts":
		return decodeInt64(d, &e.TimestampMs)
	case "rv":
		return decodeString(d, &e.RuntimeVersion)
	case "name":
		return decodeString(d, &e.Name)
	case "ver":
		return decodeString(d, &e.Version)
	case "in":
		return decodeString(d, &e.Input)
	case "out":
		return decodeString(d, &e.Output)
	case "res":
		return decodeString(d, &e.Result)
	case "data":
		return decodeString(d, &e.Data)
	case "why":
		return decodeString(d, &e.Reason)
	case "inst":
		return decodeString(d, &e.Instance)
	case "pi":
		return decodeString(d, &e.ParentInstance)
	case "pid":
		return decodeUint64(d, &e.ParentID)
	case "px":
		return decodeUint64(d, &e.ParentExecutionID)
	case "sess":
		return decodeString(d, &e.SessionID)
	case "tag":
		return decodeString(d, &e.Tag)
	case "fire":
		return decodeInt64(d, &e.FireAtMs)
	case "err":
		return decodeValue(d, &e.Details)
	case "cs":
		return decodeStringPtr(d, &e.Status)
	case "key":
		return decodeString(d, &e.Key)
	case "val":
		return decodeString(d, &e.Value)
	case "kvts":
		return decodeInt64(d, &e.LastUpdatedAtMs)
	case "cf":
		return decodeValue(d, &e.CarryForward)
	case "ics":
		return decodeStringPtr(d, &e.InitialCustomStatus)
	case "tp":
		return decodeString(d, &e.TraceParent)
	}
	return d.Skip()
}

// field reads the field named name into it.
func (it *WorkItem) field(d *msgpack.Decoder, name []byte) error {
	switch string(name) {
	case "k":
		return decodeString(d, &it.Kind)
	case "i":
		return decodeString(d, &it.Instance)
	case "x":
		return decodeUint64(d, &it.ExecutionID)
	case "id":
		return decodeUint64(d, &it.ID)
	case "name":
		return decodeString(d, &it.Name)
	case "ver":
		return decodeString(d, &it.Version)
	case "in":
		return decodeString(d, &it.Input)
	case "res":
		return decodeString(d, &it.Result)
	case "data":
		return decodeString(d, &it.Data)
	case "why":
		return decodeString(d, &it.Reason)
	case "pi":
		return decodeString(d, &it.ParentInstance)
	case "pid":
		return decodeUint64(d, &it.ParentID)
	case "px":
		return decodeUint64(d, &it.ParentExecutionID)
	case "sess":
		return decodeString(d, &it.SessionID)
	case "tag":
		return decodeString(d, &it.Tag)
	case "fire":
		return decodeInt64(d, &it.FireAtMs)
	case "err":
		return decodeValue(d, &it.Details)
	case "cf":
		return decodeValue(d, &it.CarryForward)
	case "ics":
		return decodeStringPtr(d, &it.InitialCustomStatus)
	case "tp":
		return decodeString(d, &it.TraceParent)
	}
	return d.Skip()
}
