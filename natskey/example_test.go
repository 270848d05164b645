package natskey_test

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/natskey"
)

// A message a plain nats.go producer published with a Nats-Msg-Id header: natskey keeps
// the id, and the key function falls back to it when there is no Watermill UUID.
func ExampleMsgID() {
	in := nats.NewMsg("orders")
	in.Header.Set(nats.MsgIdHdr, "order-42-paid")
	msg, err := natskey.Unmarshaler{}.Unmarshal(in)
	if err != nil {
		panic(err)
	}
	key, err := inbox.FirstOf(inbox.KeyFromUUID, natskey.MsgID)(msg)
	fmt.Println(key, err)
	// Output: order-42-paid <nil>
}
