import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.net.SocketAddress;
import java.net.SocketException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import javax.net.SocketFactory;

/**
 * pgjdbc over a Unix-domain socket, which the conformance suite gives (PGHOST is a socket
 * directory) and pgjdbc does not speak by itself: its socketFactory option, with the
 * socket's path as socketFactoryArg. A Socket over the JDK's Unix-domain SocketChannel,
 * with only what pgjdbc calls; the TCP options are no-ops.
 */
public final class UnixSocketFactory extends SocketFactory {
    private final UnixDomainSocketAddress address;

    public UnixSocketFactory(String path) {
        this.address = UnixDomainSocketAddress.of(path);
    }

    @Override
    public Socket createSocket() {
        return new UnixSocket(address);
    }

    @Override
    public Socket createSocket(String host, int port) throws IOException {
        return connected();
    }

    @Override
    public Socket createSocket(String host, int port, InetAddress local, int localPort)
        throws IOException {
        return connected();
    }

    @Override
    public Socket createSocket(InetAddress host, int port) throws IOException {
        return connected();
    }

    @Override
    public Socket createSocket(InetAddress host, int port, InetAddress local, int localPort)
        throws IOException {
        return connected();
    }

    private Socket connected() throws IOException {
        Socket socket = createSocket();
        socket.connect(null);
        return socket;
    }

    private static final class UnixSocket extends Socket {
        private final UnixDomainSocketAddress address;
        private SocketChannel channel;
        private int timeout;

        UnixSocket(UnixDomainSocketAddress address) {
            this.address = address;
        }

        /** Connects to the socket's path, whatever TCP address pgjdbc gives. */
        @Override
        public void connect(SocketAddress ignored, int timeoutMillis) throws IOException {
            channel = SocketChannel.open(StandardProtocolFamily.UNIX);
            channel.connect(address);
        }

        @Override
        public void connect(SocketAddress ignored) throws IOException {
            connect(ignored, 0);
        }

        @Override
        public boolean isConnected() {
            return channel != null && channel.isConnected();
        }

        @Override
        public boolean isClosed() {
            return channel != null && !channel.isOpen();
        }

        // Reads and writes go straight to the channel, which locks each direction apart.
        @Override
        public InputStream getInputStream() throws IOException {
            return new InputStream() {
                @Override
                public int read() throws IOException {
                    byte[] one = new byte[1];
                    return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
                }

                @Override
                public int read(byte[] bytes, int offset, int length) throws IOException {
                    return length == 0 ? 0 : channel.read(ByteBuffer.wrap(bytes, offset, length));
                }
            };
        }

        @Override
        public OutputStream getOutputStream() throws IOException {
            return new OutputStream() {
                @Override
                public void write(int b) throws IOException {
                    write(new byte[] {(byte) b}, 0, 1);
                }

                @Override
                public void write(byte[] bytes, int offset, int length) throws IOException {
                    ByteBuffer buffer = ByteBuffer.wrap(bytes, offset, length);
                    while (buffer.hasRemaining()) {
                        channel.write(buffer);
                    }
                }
            };
        }

        @Override
        public synchronized void close() throws IOException {
            if (channel != null) {
                channel.close();
            }
        }

        @Override
        public void setTcpNoDelay(boolean on) {}

        @Override
        public void setKeepAlive(boolean on) {}

        @Override
        public synchronized void setSoTimeout(int milliseconds) throws SocketException {
            timeout = milliseconds; // not applied: pgjdbc's socketTimeout stays 0 here
        }

        @Override
        public synchronized int getSoTimeout() {
            return timeout;
        }

        @Override
        public synchronized void setReceiveBufferSize(int size) {}

        @Override
        public synchronized void setSendBufferSize(int size) {}

        @Override
        public synchronized int getReceiveBufferSize() {
            return 65536;
        }

        @Override
        public synchronized int getSendBufferSize() {
            return 65536;
        }
    }
}
