import jakarta.servlet.ServletContext;
import jakarta.servlet.ServletContextEvent;
import jakarta.servlet.ServletContextListener;
import jakarta.servlet.ServletException;
import jakarta.servlet.annotation.WebListener;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import javax.naming.InitialContext;
import javax.naming.NamingException;
import javax.sql.DataSource;
import org.pgidempotency.Idempotency;
import org.pgidempotency.IdempotencyFilter;

@WebListener
public class Orders implements ServletContextListener {
    @Override
    public void contextInitialized(ServletContextEvent event) {
        ServletContext context = event.getServletContext();
        DataSource dataSource;
        try {
            dataSource = (DataSource) new InitialContext().lookup("java:comp/env/jdbc/orders");
        } catch (NamingException e) {
            throw new IllegalStateException(e);
        }
        context.addFilter("idempotency", IdempotencyFilter.builder(dataSource).build())
            .addMappingForUrlPatterns(null, false, "/orders");
        context.addServlet("orders", new OrdersServlet()).addMapping("/orders");
    }

    public static class OrdersServlet extends HttpServlet {
        @Override
        protected void doPost(HttpServletRequest request, HttpServletResponse response)
                throws IOException, ServletException {
            // The JSON body, {"item": "book"}, read by PostgreSQL's jsonb.
            String body = new String(request.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            try (PreparedStatement insert = Idempotency.connection(request).prepareStatement(
                    "INSERT INTO orders (item) VALUES (?::jsonb ->> 'item') RETURNING id")) {
                insert.setString(1, body);
                try (ResultSet row = insert.executeQuery()) {
                    row.next();
                    response.setStatus(201);
                    response.setContentType("application/json");
                    response.getWriter().print("{\"order\": " + row.getLong(1) + "}");
                }
            } catch (SQLException e) {
                throw new ServletException(e);
            }
        }
    }
}
