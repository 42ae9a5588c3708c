// tcpdoctor lab: the JDK's com.sun.net.httpserver.HttpsServer serving a small body.
// Usage: java -cp DIR HttpsServerDemo PORT KEYSTORE PASSWORD BODY_BYTES MAX_SECONDS
// KEYSTORE is PKCS12 (keytool -genkeypair -storetype PKCS12). TCP_NODELAY is off by
// default, as for HttpServer; -Dsun.net.httpserver.nodelay=true turns it on.
import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsServer;
import java.io.FileInputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.security.KeyStore;
import java.util.Arrays;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;

public class HttpsServerDemo {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        char[] password = args[2].toCharArray();
        int n = args.length > 3 ? Integer.parseInt(args[3]) : 300;
        long maxSeconds = args.length > 4 ? Long.parseLong(args[4]) : 60;
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (FileInputStream in = new FileInputStream(args[1])) {
            ks.load(in, password);
        }
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, password);
        SSLContext tls = SSLContext.getInstance("TLS");
        tls.init(kmf.getKeyManagers(), null, null);
        byte[] body = new byte[n];
        Arrays.fill(body, (byte) 'x');
        HttpsServer server = HttpsServer.create(new InetSocketAddress("127.0.0.1", port), 16);
        server.setHttpsConfigurator(new HttpsConfigurator(tls));
        server.createContext("/", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().set("Content-Type", "text/plain");
            ex.sendResponseHeaders(200, body.length);   // headers flushed here: record 1
            try (OutputStream os = ex.getResponseBody()) {
                os.write(body);                          // body flushed on close: record 2
            }
        });
        server.start();
        System.out.println("listening 127.0.0.1:" + port + " https nodelay=" + System.getProperty("sun.net.httpserver.nodelay"));
        Thread.sleep(maxSeconds * 1000);
        server.stop(0);
        System.exit(0);
    }
}
