package inboxtest

import (
	"github.com/ThreeDotsLabs/watermill/message"
)

// Handler is either shape of Watermill handler: one that returns the messages it produces
// (message.HandlerFunc, for Router.AddHandler) and one that produces none
// (message.NoPublishHandlerFunc, for Router.AddConsumerHandler), named or not.
type Handler interface {
	message.HandlerFunc | func(*message.Message) ([]*message.Message, error) |
		message.NoPublishHandlerFunc | func(*message.Message) error
}

// HandlerFunc returns h as a message.HandlerFunc, the shape the inbox middleware wraps:
// a consumer handler, func(*message.Message) error, produces no messages. It is what
// Router.AddConsumerHandler does to such a handler.
//
//	h := ib.Middleware(inboxtest.HandlerFunc(creditWallet)) // func(*message.Message) error
func HandlerFunc[H Handler](h H) message.HandlerFunc {
	switch h := any(h).(type) {
	case message.HandlerFunc:
		return h
	case func(*message.Message) ([]*message.Message, error):
		return h
	case message.NoPublishHandlerFunc:
		return noPublish(h)
	case func(*message.Message) error:
		return noPublish(h)
	}
	panic("inboxtest: unreachable: Handler has four shapes") // the constraint admits no other type
}

func noPublish(h func(*message.Message) error) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		return nil, h(msg)
	}
}
