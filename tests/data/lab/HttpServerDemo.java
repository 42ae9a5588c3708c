// tcpdoctor lab: JDK com.sun.net.httpserver serving a small body.
// Usage: java -cp DIR HttpServerDemo PORT BODY_BYTES MAX_SECONDS
// Default TCP_NODELAY is off; run with -Dsun.net.httpserver.nodelay=true to turn it on.
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.util.Arrays;

public class HttpServerDemo {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        int n = args.length > 1 ? Integer.parseInt(args[1]) : 300;
        long maxSeconds = args.length > 2 ? Long.parseLong(args[2]) : 60;
        byte[] body = new byte[n];
        Arrays.fill(body, (byte) 'x');
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 16);
        server.createContext("/", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().set("Content-Type", "text/plain");
            ex.sendResponseHeaders(200, body.length);   // headers are flushed here (write 1)
            try (OutputStream os = ex.getResponseBody()) {
                os.write(body);                          // body flushed on close (write 2)
            }
        });
        server.start();
        System.out.println("listening 127.0.0.1:" + port + " nodelay=" + System.getProperty("sun.net.httpserver.nodelay"));
        Thread.sleep(maxSeconds * 1000);
        server.stop(0);
        System.exit(0);
    }
}
