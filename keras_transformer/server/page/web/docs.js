// Swagger UI on this server's contract; validatorUrl null: no call to swagger.io's validator.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
});
